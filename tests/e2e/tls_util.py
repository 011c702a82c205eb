"""Certificates made in the test with GnuTLS's certtool (Debian's gnutls-bin): a CA, a
server certificate for localhost/127.0.0.1 signed by it, client certificates, an expired
one. Everything lives in the directory given and is gone with it."""
import shutil
import subprocess
from pathlib import Path

import pytest

CERTTOOL = shutil.which("certtool")


def need_certtool():
    if CERTTOOL is None:
        pytest.fail("certtool (gnutls-bin) is missing: tests/install-deps.sh installs it")


def _run(*args):
    r = subprocess.run([CERTTOOL, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"certtool {' '.join(args)}: {r.stderr[-800:]}")


def _key(path):
    _run("--generate-privkey", "--key-type=ecdsa", "--outfile", str(path))
    path.chmod(0o600)


def _template(path, lines, dates):
    if dates is None:
        lines = lines + ["expiration_days = 2"]
    else:
        lines = lines + [f'activation_date = "{dates[0]}"', f'expiration_date = "{dates[1]}"']
    path.write_text("\n".join(lines) + "\n")


class CA:
    """A certificate authority: .pem (its certificate), and a way to sign others."""

    def __init__(self, directory, name="memtrim test CA"):
        need_certtool()
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        safe = name.replace(" ", "-")
        self.key = self.dir / f"{safe}.key"
        self.pem = self.dir / f"{safe}.pem"
        _key(self.key)
        tmpl = self.dir / f"{safe}.tmpl"
        _template(tmpl, [f'cn = "{name}"', "ca", "cert_signing_key", "crl_signing_key"], None)
        _run("--generate-self-signed", "--load-privkey", str(self.key), "--template", str(tmpl),
             "--outfile", str(self.pem))

    def issue(self, name, client=False, dates=None, hosts=("localhost",), ips=("127.0.0.1",)):
        """(certificate path, key path): a server (or client) certificate signed by this CA.
        dates: (activation, expiration) strings such as "2020-01-01 00:00:00 UTC"."""
        key = self.dir / f"{name}.key"
        pem = self.dir / f"{name}.pem"
        _key(key)
        lines = [f'cn = "{name}"', "signing_key", "encryption_key"]
        lines.append("tls_www_client" if client else "tls_www_server")
        if not client:
            lines += [f'dns_name = "{h}"' for h in hosts] + [f'ip_address = "{i}"' for i in ips]
        tmpl = self.dir / f"{name}.tmpl"
        _template(tmpl, lines, dates)
        _run("--generate-certificate", "--load-privkey", str(key), "--load-ca-certificate",
             str(self.pem), "--load-ca-privkey", str(self.key), "--template", str(tmpl),
             "--outfile", str(pem))
        return pem, key
