"""Probe run by the job's python: whether its boto3 finds AWS credentials (no AWS call).

Usage: python3 _credentials_probe.py -> {"found", "method", "error"} on the last stdout line.
"""

import json

result = {"found": False, "method": "", "error": ""}
try:
    import boto3

    credentials = boto3.Session().get_credentials()
    result["found"] = credentials is not None
    result["method"] = str(getattr(credentials, "method", "") or "")
except BaseException as exc:  # noqa: BLE001 - report, do not crash
    result["error"] = f"{type(exc).__name__}: {exc}"[:300]
print()
print(json.dumps(result))
