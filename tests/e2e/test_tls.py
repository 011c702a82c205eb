"""HTTPS through libmicrohttpd's GnuTLS support, with real clients: curl with and without
the test's CA, a wrong CA, TLS 1.1, plain HTTP to the TLS port; every start error names
its file (missing, not a file, a key others may read, not PEM, a key of another pair, an
expired certificate); client certificates (HttpsClientCA) with and without one, and one
of another CA; a certificate renewed while clients poll, with no failed request; the
clients' CA file rotated while the server runs."""
import json
import ssl
import subprocess
import threading
from pathlib import Path

import pytest
import requests

from conftest import Demo
from tls_util import CA
from wait import wait_for

TOKEN = "tls-admin-4b1e"
READ = "tls-read-77c0"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CA(d / "ca")
    other = CA(d / "other", name="another CA")
    srv = ca.issue("localhost")
    client = ca.issue("prometheus", client=True)
    stranger = other.issue("stranger", client=True)
    return {"ca": ca, "other": other, "srv": srv, "client": client, "stranger": stranger, "dir": d}


def tls_config(pki, **extra):
    cfg = {"HttpsCertificate": str(pki["srv"][0]), "HttpsPrivateKey": str(pki["srv"][1])}
    cfg.update(extra)
    return cfg


def curl(*args, timeout=20):
    r = subprocess.run(["curl", "-sS", "--max-time", "10", *args], capture_output=True,
                       text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def test_https_with_curl(start_demo, pki):
    d = start_demo(tls_config(pki, AuthToken=TOKEN, ReadToken=READ), workers=1, study_mb=4,
                   ca=pki["ca"].pem)
    url = f"https://localhost:{d.port}"
    rc, out, err = curl("--cacert", str(pki["ca"].pem), url + "/healthz")
    assert rc == 0 and json.loads(out)["status"] == "ok", (rc, out, err)
    rc, out, err = curl("--cacert", str(pki["ca"].pem), "-H", f"Authorization: Bearer {READ}",
                        url + "/metrics")
    assert rc == 0 and "memtrim_rss_bytes" in out, (rc, out[:300], err)
    # POST with the admin token over TLS
    rc, out, err = curl("--cacert", str(pki["ca"].pem), "-X", "POST", "-H",
                        f"Authorization: Bearer {TOKEN}", url + "/memory/trim")
    assert rc == 0 and "released_bytes" in out, (rc, out, err)
    # Kept alive: a second request reuses the connection (no "Connection: close" outside a
    # renewal: comparing the wrong daemon once made every TLS reply close its connection).
    rc, out, err = curl("-v", "--cacert", str(pki["ca"].pem), url + "/healthz", url + "/healthz")
    assert rc == 0 and "Re-using existing connection" in err, err[-1500:]
    assert "Connection: close" not in err
    # Without the CA, or with another one: curl refuses the server (exit 60).
    rc, out, err = curl(url + "/healthz")
    assert rc == 60, (rc, err)
    rc, out, err = curl("--cacert", str(pki["other"].pem), url + "/healthz")
    assert rc == 60, (rc, err)
    # TLS 1.1 and older are refused.
    rc, out, err = curl("--cacert", str(pki["ca"].pem), "--tlsv1.0", "--tls-max", "1.1",
                        url + "/healthz")
    assert rc == 35, (rc, err)
    # TLS 1.2 and 1.3 both work.
    for v in ("1.2", "1.3"):
        rc, out, err = curl("--cacert", str(pki["ca"].pem), f"--tlsv{v}", "--tls-max", v,
                            url + "/healthz")
        assert rc == 0, (v, rc, err)
    # Plain HTTP to the TLS port gets nothing (no token read in clear), and the server serves on.
    rc, out, err = curl("-H", f"Authorization: Bearer {TOKEN}", f"http://localhost:{d.port}/healthz")
    assert rc != 0 and out == "", (rc, out, err)
    assert d.get("/healthz").status_code == 200
    log = d.output()
    assert f"serving HTTPS on 127.0.0.1:{d.port}" in log, log[-2000:]
    d.stop()
    assert TOKEN not in d.output() and READ not in d.output()


def start_error(config):
    with pytest.raises(RuntimeError) as e:
        Demo(config, workers=1, study_mb=1)
    return str(e.value)


def test_start_errors_name_the_file(pki, tmp_path):
    cert, key = pki["srv"]
    missing = tmp_path / "nope.pem"
    msg = start_error({"HttpsCertificate": str(missing), "HttpsPrivateKey": str(key)})
    assert f"HttpsCertificate '{missing}': no such file" in msg, msg[-600:]
    msg = start_error({"HttpsCertificate": str(tmp_path), "HttpsPrivateKey": str(key)})
    assert f"HttpsCertificate '{tmp_path}': not a regular file" in msg, msg[-600:]
    def copy(src, name, mode):
        dst = tmp_path / name
        dst.write_bytes(src.read_bytes())
        dst.chmod(mode)
        return dst
    loose = copy(key, "loose.key", 0o640)
    msg = start_error({"HttpsCertificate": str(cert), "HttpsPrivateKey": str(loose)})
    assert f"HttpsPrivateKey '{loose}' has mode 0640" in msg and "chmod 600" in msg, msg[-600:]
    notpem = tmp_path / "notpem.pem"
    notpem.write_text("hello\n")
    msg = start_error({"HttpsCertificate": str(notpem), "HttpsPrivateKey": str(key)})
    assert f"HttpsCertificate '{notpem}': not a PEM certificate" in msg, msg[-600:]
    certkey = copy(cert, "cert-as-key.pem", 0o600)
    msg = start_error({"HttpsCertificate": str(cert), "HttpsPrivateKey": str(certkey)})
    assert f"HttpsPrivateKey '{certkey}': not a PEM private key" in msg, msg[-600:]
    # A key of another pair.
    _, client_key = pki["client"]
    msg = start_error({"HttpsCertificate": str(cert), "HttpsPrivateKey": str(client_key)})
    assert f"HttpsPrivateKey '{client_key}' does not match the certificate" in msg, msg[-600:]
    # An expired certificate.
    old = pki["ca"].issue("expired", dates=("2020-01-01 00:00:00 UTC", "2020-02-01 00:00:00 UTC"))
    msg = start_error({"HttpsCertificate": str(old[0]), "HttpsPrivateKey": str(old[1])})
    assert f"HttpsCertificate '{old[0]}': the certificate expired on 2020-02-01" in msg, msg[-600:]
    # The client CA is checked too; a missing key is a configuration error.
    msg = start_error({"HttpsCertificate": str(cert), "HttpsPrivateKey": str(key),
                       "HttpsClientCA": str(missing)})
    assert f"HttpsClientCA '{missing}': no such file" in msg, msg[-600:]
    msg = start_error({"HttpsCertificate": str(cert)})
    assert "HttpsCertificate and HttpsPrivateKey: give both" in msg, msg[-600:]


def test_client_certificates(start_demo, pki):
    """HttpsClientCA: a certificate of that CA is required (the read token beside it)."""
    d = start_demo(tls_config(pki, HttpsClientCA=str(pki["ca"].pem), AuthToken=TOKEN,
                              ReadToken=READ),
                   workers=1, study_mb=4, ca=pki["ca"].pem, cert=pki["client"])
    url = f"https://localhost:{d.port}/metrics"
    ca = ["--cacert", str(pki["ca"].pem), "-H", f"Authorization: Bearer {READ}"]
    rc, out, err = curl(*ca, "--cert", str(pki["client"][0]), "--key", str(pki["client"][1]),
                        url)
    assert rc == 0 and "memtrim_rss_bytes" in out, (rc, out[:300], err)
    rc, out, err = curl(*ca, "-w", "%{http_code}", url)
    assert rc == 0 and out.endswith("403") and "client_certificate" in out, (rc, out, err)
    assert "no client certificate was sent" in out
    rc, out, err = curl(*ca, "--cert", str(pki["stranger"][0]), "--key", str(pki["stranger"][1]),
                        "-w", "%{http_code}", url)
    assert rc == 0 and out.endswith("403") and "not accepted" in out, (rc, out, err)
    assert "memtrim_rss_bytes" not in out


def served_certificate(port):
    return ssl.get_server_certificate(("127.0.0.1", port))


def same_cert(pem_a, pem_b):
    return ssl.PEM_cert_to_DER_cert(pem_a) == ssl.PEM_cert_to_DER_cert(pem_b)


def live_copy(pki, tmp_path):
    """The server's files copied where a test may replace them: (cert, key)."""
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "cert.pem", live / "key.pem"
    cert.write_bytes(pki["srv"][0].read_bytes())
    key.write_bytes(pki["srv"][1].read_bytes())
    key.chmod(0o600)
    return cert, key


def test_certificate_renewed_while_clients_poll(start_demo, pki, tmp_path):
    """The files are replaced (rename, as certbot and cert-manager do); new connections get
    the new certificate within seconds, a kept-alive session and fresh connections keep
    working through the change: not one failed request."""
    cert, key = live_copy(pki, tmp_path)
    d = start_demo({"HttpsCertificate": str(cert), "HttpsPrivateKey": str(key),
                    "AuthToken": TOKEN, "ReadToken": READ},
                   workers=1, study_mb=4, ca=pki["ca"].pem)
    assert same_cert(served_certificate(d.port), cert.read_text())
    failures, counts, stop = [], {"session": 0, "fresh": 0}, threading.Event()
    hdr = {"Authorization": f"Bearer {READ}"}

    def session_poller():  # keep-alive, as Prometheus scrapes
        s = requests.Session()
        while not stop.is_set():
            try:
                r = s.get(f"https://localhost:{d.port}/metrics", headers=hdr,
                          verify=str(pki["ca"].pem), timeout=10)
                if r.status_code != 200:
                    failures.append(("session", r.status_code))
                counts["session"] += 1
            except requests.RequestException as e:
                failures.append(("session", repr(e)))

    def fresh_poller():  # a new connection each time
        while not stop.is_set():
            rc, out, err = curl("--cacert", str(pki["ca"].pem), "-H", f"Authorization: Bearer {READ}",
                                "-o", "/dev/null", "-w", "%{http_code}",
                                f"https://localhost:{d.port}/memory/stats")
            if rc != 0 or out != "200":
                failures.append(("fresh", rc, out, err))
            counts["fresh"] += 1

    threads = [threading.Thread(target=session_poller), threading.Thread(target=fresh_poller)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: counts["session"] >= 5, 30, "5 requests on the kept-alive session")
        renewed = pki["ca"].issue("localhost-renewed")
        for src, dst in ((renewed[1], key), (renewed[0], cert)):
            tmp = dst.with_suffix(".new")
            tmp.write_bytes(src.read_bytes())
            tmp.chmod(0o600)
            tmp.rename(dst)
        wait_for(lambda: same_cert(served_certificate(d.port), renewed[0].read_text()), 30,
                 "the renewed certificate to be served", interval=0.1)
        before = dict(counts)
        wait_for(lambda: (counts["session"] >= before["session"] + 5
                          and counts["fresh"] >= before["fresh"] + 3), 30,
                 f"more requests after the renewal (before: {before})")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert failures == [], failures[:5]
    assert counts["session"] > 10 and counts["fresh"] > 3, counts
    assert "renewed: new connections get it" in d.output()


def test_renewal_that_does_not_load_keeps_the_old_one(start_demo, pki, tmp_path):
    cert, key = live_copy(pki, tmp_path)
    d = start_demo({"HttpsCertificate": str(cert), "HttpsPrivateKey": str(key)},
                   workers=1, study_mb=4, ca=pki["ca"].pem)
    other = pki["ca"].issue("mismatch")
    cert.write_bytes(other[0].read_bytes())  # the key stays the old one: they do not match
    wait_for(lambda: "cannot be used, the previous certificate stays in use" in d.output(), 30,
             "the log to say the renewal cannot be used", interval=0.1)
    assert "does not match the certificate" in d.output()
    assert same_cert(served_certificate(d.port), pki["srv"][0].read_text())
    assert d.get("/healthz").status_code == 200


def test_client_ca_rotated(start_demo, pki, tmp_path):
    """HttpsClientCA replaced (rename) while the server runs: within seconds new
    connections need a certificate of the new CA; one of the old CA is refused."""
    live = tmp_path / "clientca"
    live.mkdir()
    ca_file = live / "clients.pem"
    ca_file.write_bytes(pki["ca"].pem.read_bytes())
    d = start_demo(tls_config(pki, HttpsClientCA=str(ca_file), AuthToken=TOKEN,
                              ReadToken=READ),
                   workers=1, study_mb=4, ca=pki["ca"].pem, cert=pki["client"])
    url = f"https://localhost:{d.port}/metrics"
    base = ["--cacert", str(pki["ca"].pem), "-H", f"Authorization: Bearer {READ}",
            "-o", "/dev/null", "-w", "%{http_code}"]

    def status(pair):
        rc, out, err = curl(*base, "--cert", str(pair[0]), "--key", str(pair[1]), url)
        assert rc == 0, (rc, out, err)
        return out

    assert status(pki["client"]) == "200"
    assert status(pki["stranger"]) == "403"
    tmp = live / "clients.new"
    tmp.write_bytes(pki["other"].pem.read_bytes())  # the clients' CA is now "another CA"
    tmp.rename(ca_file)
    wait_for(lambda: status(pki["stranger"]) == "200", 30,
             "a client of the new CA to be accepted", interval=0.2)
    assert status(pki["client"]) == "403"
    assert "renewed: new connections get it" in d.output()


def nobody_uid():
    import pwd
    return pwd.getpwnam("nobody").pw_uid


def test_key_of_another_user_refused(start_demo, pki, tmp_path):
    """#31 F11: a private key owned by another user (0600, nobody) was loaded by a root host,
    and its later changes followed. It gets the token files' owner rule at start and at every
    reload: the host's user or root. Run as root (CI's user) so the file can be given away."""
    import os
    assert os.geteuid() == 0, "giving a file to nobody needs root (CI runs as root)"
    cert, key = live_copy(pki, tmp_path)
    theirs = tmp_path / "theirs.key"
    theirs.write_bytes(key.read_bytes())
    theirs.chmod(0o600)
    os.chown(theirs, nobody_uid(), -1)
    msg = start_error({"HttpsCertificate": str(cert), "HttpsPrivateKey": str(theirs)})
    assert f"HttpsPrivateKey '{theirs}' belongs to another user (uid {nobody_uid()})" in msg, \
        msg[-600:]
    # The reload: a renewed pair whose key another user owns keeps the old certificate.
    d = start_demo({"HttpsCertificate": str(cert), "HttpsPrivateKey": str(key)},
                   workers=1, study_mb=4, ca=pki["ca"].pem)
    renewed = pki["ca"].issue("localhost-theirs")
    for src, dst, owner in ((renewed[1], key, nobody_uid()), (renewed[0], cert, -1)):
        tmp = dst.with_suffix(".new")
        tmp.write_bytes(src.read_bytes())
        tmp.chmod(0o600)
        os.chown(tmp, owner, -1)
        tmp.rename(dst)
    wait_for(lambda: "cannot be used, the previous certificate stays in use" in d.output(), 30,
             "the log to say the renewal cannot be used", interval=0.1)
    assert f"HttpsPrivateKey '{key}' belongs to another user" in d.output()
    assert same_cert(served_certificate(d.port), pki["srv"][0].read_text())
    # Given back to the host's user, the same files load.
    os.chown(key, 0, -1)
    wait_for(lambda: same_cert(served_certificate(d.port), renewed[0].read_text()), 30,
             "the renewed certificate to be served once its key is the host user's",
             interval=0.1)
