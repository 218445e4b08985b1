"""scripts/fetch_fineweb.py against a local HTTP server on 127.0.0.1 that supports Range and can
cut a download short: argument checks, a fresh fetch, resume after an interruption (the second
request must ask for the remaining bytes only), skipping good shards, and a bad shard refused."""
import http.server
import os
import struct
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "fetch_fineweb.py")


def shard_bytes(n, seed, magic=20240520):
    body = bytes((seed * 7 + i * 13) % 256 for i in range(2 * n))
    return struct.pack("<256i", magic, 1, n, *([0] * 253)) + body


files = {
    "fineweb_val_000000.bin": shard_bytes(50000, 1),
    "fineweb_train_000001.bin": shard_bytes(70000, 2),
    "fineweb_train_000002.bin": shard_bytes(30000, 3),
}
state = {"cut_next": 0, "ranges": []}


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        name = self.path.rsplit("/", 1)[-1]
        data = files.get(name)
        if data is None:
            self.send_error(404)
            return
        start = 0
        rng = self.headers.get("Range")
        state["ranges"].append((name, rng))
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        payload = data[start:]
        if state["cut_next"]:
            payload = payload[:state["cut_next"]]
            state["cut_next"] = 0
        self.wfile.write(payload)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_address[1]}/data"


def fetch(*args, base=None):
    r = subprocess.run([sys.executable, SCRIPT, *args, "--base-url", base or url, "--timeout", "10"], capture_output=True,
                       text=True, timeout=120)
    return r.returncode, r.stderr


with tempfile.TemporaryDirectory() as d:
    rc, err = fetch("-1", "--out-dir", d)
    check("negative count is a usage error", rc == 2 and "train_shards" in err, err)
    rc, err = fetch("500", "--out-dir", d)
    check("too many shards is a usage error", rc == 2, err)

    # interrupted download: the first request is cut after 30000 bytes
    state["cut_next"] = 30000
    rc, err = fetch("2", "--out-dir", d)
    check("interrupted fetch fails", rc == 1 and "resume" in err, err)
    part = os.path.join(d, "fineweb_val_000000.bin.part")
    check("partial file kept", os.path.exists(part) and os.path.getsize(part) == 30000)
    state["ranges"].clear()
    rc, err = fetch("2", "--out-dir", d)
    check("resumed fetch succeeds", rc == 0, err)
    check("resume asked for the rest only", ("fineweb_val_000000.bin", "bytes=30000-") in state["ranges"], str(state["ranges"]))
    for name in files:
        p = os.path.join(d, name)
        check(f"{name} identical", os.path.exists(p) and open(p, "rb").read() == files[name])
    check("no .part left", not any(f.endswith(".part") for f in os.listdir(d)))

    # good shards are skipped
    state["ranges"].clear()
    rc, err = fetch("2", "--out-dir", d)
    check("second run downloads nothing", rc == 0 and not state["ranges"], str(state["ranges"]))

    # a local shard that is corrupt is fetched again; until the replacement arrives it stays
    p = os.path.join(d, "fineweb_train_000001.bin")
    with open(p, "r+b") as f:
        f.truncate(5000)
    rc, err = fetch("2", "--out-dir", d, base="http://127.0.0.1:9/none")
    check("corrupt local shard, server unreachable: the bad file is not deleted", rc == 1 and os.path.getsize(p) == 5000, err)
    rc, err = fetch("2", "--out-dir", d)
    check("corrupt local shard re-fetched", rc == 0 and open(p, "rb").read() == files["fineweb_train_000001.bin"], err)

with tempfile.TemporaryDirectory() as d:
    files["fineweb_val_000000.bin"] = shard_bytes(1000, 4, magic=42)
    rc, err = fetch("0", "--out-dir", d)
    check("bad magic from the server is refused", rc == 1 and "bad magic 42" in err and "fineweb_val_000000.bin" in err, err)
    check("bad file not installed, kept as .bad", not os.path.exists(os.path.join(d, "fineweb_val_000000.bin")) and
          os.path.exists(os.path.join(d, "fineweb_val_000000.bin.bad")))
    r = subprocess.run([sys.executable, SCRIPT, "0", "--out-dir", d, "--base-url", url, "--timeout", "nan"], capture_output=True, text=True)
    rc, err = r.returncode, r.stderr
    check("--timeout nan: a usage error naming the flag", rc == 2 and "--timeout" in err and "Traceback" not in err, err)

with tempfile.TemporaryDirectory() as d:
    rc, err = fetch("1", "--out-dir", d, base="http://127.0.0.1:9/none")
    check("unreachable server is a clear error", rc == 1 and "offline" in err, err)

server.shutdown()
finish("fetch")
