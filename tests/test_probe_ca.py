"""``audit probe`` against an HTTPS receiver whose certificate a private CA signed (issue 37).

The CA and the server certificate are made here with the ``openssl`` command; the receiver is
the reference one, served by uvicorn over TLS on 127.0.0.1.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import certifi
import pytest
import uvicorn

from audit.cli import main
from audit.errors import InputError
from audit.receiver import receiver_app
from audit.receiver.probe import tls_verify
from audit.receiver.reference import bind

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")

SUB = "wh_main"
CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = audit probe test CA
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[leaf_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
authorityKeyIdentifier = keyid
"""
EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=20, check=True
    )
    return done.stdout


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A private CA (ca.pem), a certificate it signed for 127.0.0.1 (leaf.pem, leaf.key) and a
    folder holding the CA under its hash name, as SSL_CERT_DIR wants it."""
    d = tmp_path_factory.mktemp("pki")
    (d / "openssl.cnf").write_text(CONFIG)
    cnf = ["-config", "openssl.cnf"]
    _openssl(
        "req",
        "-x509",
        *cnf,
        "-extensions",
        "ca_ext",
        *EC,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        cwd=d,
    )
    _openssl(
        "req",
        "-new",
        *cnf,
        "-subj",
        "/CN=127.0.0.1",
        *EC,
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
        cwd=d,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "openssl.cnf",
        "-extensions",
        "leaf_ext",
        "-out",
        "leaf.pem",
        cwd=d,
    )
    hashed = d / "certs"
    hashed.mkdir()
    name = _openssl("x509", "-hash", "-noout", "-in", "ca.pem", cwd=d).strip()
    shutil.copy(d / "ca.pem", hashed / f"{name}.0")
    return {"ca": d / "ca.pem", "cert": d / "leaf.pem", "key": d / "leaf.key", "dir": hashed}


@contextmanager
def serve_tls(app, cert: Path, key: Path) -> Iterator[str]:
    """Serve ``app`` over HTTPS with uvicorn on 127.0.0.1:<free port>; yield its base URL."""
    sock = bind("127.0.0.1", 0)
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_level="critical",  # the refused handshakes are the point, not news
        access_log=False,
        ssl_certfile=str(cert),
        ssl_keyfile=str(key),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # a guard against hangs, not a bound on speed
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"https://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture
def secrets_file(tmp_path: Path) -> Path:
    p = tmp_path / "secrets.json"
    p.write_text(json.dumps({SUB: [{"secret": "whsec_tls_probe_secret_1"}]}))
    p.chmod(0o600)
    return p


@pytest.fixture
def no_ca_env(monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    return monkeypatch


def test_probe_trusts_a_private_ca_from_ca_or_ssl_cert_file(
    pki, secrets_file, tmp_path, no_ca_env, capsys
):
    app = receiver_app(secrets_file, tmp_path / "captures", subscription_id=SUB)
    only = ["--only", "valid_accepted,missing_signature_rejected"]
    with serve_tls(app, pki["cert"], pki["key"]) as base:
        args = ["probe", f"{base}/hooks", "--secrets", str(secrets_file), "--subscription", SUB]
        capsys.readouterr()
        # Without the CA, verification fails: unreachable, exit 3, one line that says what to do.
        assert main([*args, *only]) == 3
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1
        assert "CERTIFICATE_VERIFY_FAILED" in err and "give --ca FILE or set SSL_CERT_FILE" in err
        # --ca trusts only its CAs: the public bundle does not vouch for this receiver.
        assert main([*args, *only, "--ca", certifi.where()]) == 3
        assert "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err

        assert main([*args, *only, "--ca", str(pki["ca"])]) == 0
        assert "passed 2, failed 0" in capsys.readouterr().out
        # A name the certificate does not hold fails with the CA too, and gets no --ca hint.
        args_by_name = [*args[:1], args[1].replace("127.0.0.1", "localhost"), *args[2:]]
        assert main([*args_by_name, *only, "--ca", str(pki["ca"])]) == 3
        err = capsys.readouterr().err
        assert "Hostname mismatch" in err and "--ca" not in err

        no_ca_env.setenv("SSL_CERT_FILE", str(pki["ca"]))
        assert main([*args, *only]) == 0
        no_ca_env.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
        assert main([*args, *only, "--ca", str(pki["ca"])]) == 0  # --ca wins over the variable
        no_ca_env.delenv("SSL_CERT_FILE")
        no_ca_env.setenv("SSL_CERT_DIR", str(pki["dir"]))
        assert main([*args, *only]) == 0
        assert "passed 2, failed 0" in capsys.readouterr().out


def test_a_bad_ca_file_is_one_line_and_exit_3(pki, secrets_file, tmp_path, no_ca_env, capsys):
    (tmp_path / "empty.pem").write_text("")
    (tmp_path / "key.pem").write_bytes(pki["key"].read_bytes())  # a key, not a certificate
    base = ["probe", "https://127.0.0.1:9/hooks", "--secrets", str(secrets_file)]
    base += ["--subscription", SUB]
    cases = [
        (["--ca", str(tmp_path / "missing.pem")], "cannot read the CA file (No such file"),
        (["--ca", str(tmp_path / "empty.pem")], "the CA file holds no readable PEM certificate"),
        (["--ca", str(tmp_path / "key.pem")], "the CA file holds no readable PEM certificate"),
        (["--ca", str(tmp_path)], "the CA file is not a regular file"),
        (["--ca", str(tmp_path / "missing.pem"), "--dry-run"], "cannot read the CA file"),
    ]
    for extra, message in cases:
        assert main([*base, *extra]) == 3, extra
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and message in err and "Traceback" not in err, (extra, err)
    no_ca_env.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    assert main(base) == 3
    err = capsys.readouterr().err
    assert "missing.pem: cannot read the CA file named by SSL_CERT_FILE (No such file" in err
    no_ca_env.delenv("SSL_CERT_FILE")
    no_ca_env.setenv("SSL_CERT_DIR", str(tmp_path / "nowhere"))
    assert main(base) == 3
    assert "nowhere: SSL_CERT_DIR is not a folder" in capsys.readouterr().err


def test_tls_verify_reads_the_variables_only_without_ca(pki, tmp_path):
    assert tls_verify(None, {}) is True  # certifi's bundle, as before
    assert tls_verify(None, {"SSL_CERT_FILE": ""}) is True  # an empty variable is unset
    ctx = tls_verify(None, {"SSL_CERT_FILE": str(pki["ca"])})
    assert not isinstance(ctx, bool) and ctx.cert_store_stats()["x509_ca"] == 1
    ctx = tls_verify(pki["ca"], {"SSL_CERT_FILE": str(tmp_path / "missing.pem")})
    assert not isinstance(ctx, bool) and ctx.check_hostname
    with pytest.raises(InputError, match="SSL_CERT_FILE"):
        tls_verify(None, {"SSL_CERT_FILE": str(tmp_path / "missing.pem")})
