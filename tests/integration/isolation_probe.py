"""What a hostile task of tenant B tries (tests/integration/test_isolation_default.py): run as
the task itself, it prints one ``PROBE {json}`` line of what each attempt got.

Usage: python isolation_probe.py CONFIG_JSON
  CONFIG_JSON: {"state": dir, "kafka": [host:port, ...], "api": url, "token_b": token,
                "job_a": job id, "topics": [topic, ...], "site": site-packages dir}
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def _read(path: str) -> str:
    try:
        return "read:" + Path(path).read_text()[:80]
    except OSError as exc:
        return f"{type(exc).__name__}"


def _listdir(path: str) -> str:
    try:
        return "listed:" + ",".join(sorted(os.listdir(path)))
    except OSError as exc:
        return f"{type(exc).__name__}"


def _produce(bootstrap: str, topic: str, extra: dict[str, Any]) -> str:
    """Try to produce one record; return ``delivered`` or the error codes seen."""
    from confluent_kafka import Producer

    seen: list[str] = []
    done: list[str] = []
    conf = {
        "bootstrap.servers": bootstrap,
        "message.timeout.ms": 6000,
        "socket.timeout.ms": 3000,
        "log_level": 0,
        "error_cb": lambda e: seen.append(e.name()),
        **extra,
    }
    p = Producer(conf)
    p.produce(
        topic,
        key=b"j",
        value=b"forged",
        on_delivery=lambda e, m: done.append(e.name() if e else "delivered"),
    )
    p.flush(10)
    return ",".join(done + sorted(set(seen))) or "no answer"


def _http(method: str, url: str, token: str | None, body: dict[str, Any] | None = None) -> int:
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.request(method, url, headers=headers, json=body, timeout=10).status_code


def main() -> None:
    cfg = json.loads(sys.argv[1])
    sys.path.insert(0, cfg["site"])  # the test's own packages (confluent-kafka, httpx)
    state, job = cfg["state"], cfg["job_a"]
    out: dict[str, Any] = {
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "groups": os.getgroups(),
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME", ""),
        "env_secrets": sorted(
            k for k in os.environ if any(s in k.upper() for s in ("KAFKA", "SASL", "PASSW"))
        ),
        "api_token": _read(f"{state}/api-token"),
        "tokens_file": _read(f"{state}/api-tokens.json"),
        "kafka_password": _read(f"{state}/kafka/cronlog.password"),
        "list_state": _listdir(state),
        "worker_environ": _read(f"/proc/{os.getppid()}/environ"),
    }
    guess = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
    guess |= {"sasl.username": "admin", "sasl.password": "admin"}
    tries = {f"produce {b} {t}": (b, t, {}) for b in cfg["kafka"] for t in cfg["topics"]}
    tries |= {f"produce-as-admin {b}": (b, cfg["topics"][0], guess) for b in cfg["kafka"]}
    with ThreadPoolExecutor(len(tries)) as pool:  # each waits out its message timeout
        futures = {name: pool.submit(_produce, *args) for name, args in tries.items()}
    out |= {name: f.result() for name, f in futures.items()}
    jobs = f"{cfg['api']}/api/v1/jobs/{job}"
    out["api_delete_no_token"] = _http("DELETE", jobs, None)
    out["api_delete_token_b"] = _http("DELETE", jobs, cfg["token_b"])
    out["api_pause_token_b"] = _http("PATCH", jobs, cfg["token_b"], {"paused": True})
    out["api_trigger_no_token"] = _http("POST", f"{jobs}/trigger", None)
    print("PROBE " + json.dumps(out, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
