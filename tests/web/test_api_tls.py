"""The admin API over TLS with the operator's certificate, as ``director run`` serves it."""

from __future__ import annotations

import json
import ssl
import urllib.request
from pathlib import Path

from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from lab.kubeapi import FakeApiServer
from tests.serverlab import certificate, config
from tests.weblab import TOKEN


def test_tls_with_the_operators_certificate(tmp_path: Path) -> None:
    cert, key = certificate(tmp_path)
    with FakeApiServer() as api:
        text = config(tmp_path, api, f"  tls_cert: {cert}\n  tls_key: {key}\n")
        runtime = Runtime(parse_config(text, "director.yaml"), FakeIpvs()).start()
        try:
            assert runtime.wait_ready(20) and runtime.api is not None
            context = ssl.create_default_context(cafile=str(cert))
            url = f"https://127.0.0.1:{runtime.api.port}/api/v1/status"
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
            with urllib.request.urlopen(request, context=context, timeout=10) as reply:
                assert json.loads(reply.read())["ready"] is True
        finally:
            runtime.stop()
