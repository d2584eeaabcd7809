"""The HTTP API: commands out to ``cronlog.commands``, reads from a run-events projection.

Where things go (rooms import inward only: shapes <- readmodel <- access <- routes <- console
<- app; ``tests/unit/test_rings.py``):

- ``app.py``: wiring only: ``create_app`` builds the components, includes the routers.
- ``routes/``: every endpoint, one module per family, each an ``APIRouter`` that ``app.py``
  includes. A new read of jobs or runs goes in ``routes/reads.py``; a write (a command, answered
  after read-your-writes) in ``routes/writes.py``; operators' run and dead-letter actions in
  ``routes/operate.py``; a new family gets a module of its own (as ``tenants``, ``workers``,
  ``logs``, ``backfill``, ``health``, ``metrics``).
- ``shapes/``: the JSON shapes: the job definition (``definition.py``), other request bodies
  (``requests.py``), answers (``responses.py``), their mapping to the core's types.
- ``readmodel/``: the projection of run-events into the embedded store, and the queries
  (``views.py``, ``listings.py``) the routes call; a new read's data goes there first.
- ``access/``: authentication, tenant scoping, idempotency keys, protective headers.
- ``console/``: the server-rendered web console.
"""
