"""TLS towards a server serving TLS only: the CA file verifies it, server_name checks the
certificate's name when the target is an address."""
from __future__ import annotations

import subprocess

import pytest

from ratelimit_client import RateLimitClient, TlsOptions, UnavailableError


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def certs(tmp_path):
    """A CA and a server certificate for the name ratelimit.test only (not 127.0.0.1)."""
    d = tmp_path / "certs"
    d.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=test-ca", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
             "server.csr", "-subj", "/CN=ratelimit.test", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=DNS:ratelimit.test\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf",
             cwd=d)
    return d


def test_tls_with_ca_file_and_server_name(start_server, certs):
    server = start_server(["--tls_cert_file=%s" % (certs / "server.pem"),
                           "--tls_key_file=%s" % (certs / "server.key")])
    tls = TlsOptions(ca_file=str(certs / "ca.pem"), server_name="ratelimit.test")
    with RateLimitClient(server.target, tls=tls) as client:
        assert client.consume("api", "u").allowed
    # The certificate does not name 127.0.0.1: without server_name the handshake fails.
    with RateLimitClient(server.target, tls=TlsOptions(ca_file=str(certs / "ca.pem")),
                         check_retries=0) as client:
        with pytest.raises(UnavailableError):
            client.consume("api", "u")
    # Plaintext towards a TLS port fails too.
    with RateLimitClient(server.target, check_retries=0) as client:
        with pytest.raises(UnavailableError):
            client.consume("api", "u")


def test_unreadable_tls_file_names_it(tmp_path):
    with pytest.raises(ValueError, match="tls.ca_file .*missing.pem"):
        RateLimitClient("127.0.0.1:1", tls=TlsOptions(ca_file=str(tmp_path / "missing.pem")))
