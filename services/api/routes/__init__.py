"""The API's endpoints, one module per family of routes (each an ``APIRouter``)."""
