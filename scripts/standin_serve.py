"""Stand-in serve for readiness tests: a head that is ready only after its start-up delay and once every worker has
joined, and workers that keep trying to join it. Standard library only (socket, threading): it runs under the
stand-in base's python3-minimal, passed to `python3 -c` by scripts/standin_launcher.py.

Head:   GET /health is 503 until ready, then 200; GET /v1/models lists one model; anything else is 404.
Worker: connects to the head's rendezvous port, says hello, and reconnects whenever the connection drops.
Crash:  STANDIN_CRASH_IF=NAME=VALUE makes start-up fail (exit 1) when the environment holds that switch value.
Stall:  STANDIN_STALL_IF=NAME=VALUE keeps the head starting (503) for ever when the environment holds that value.
"""

import os
import socket
import sys
import threading
import time

MODELS = b'{"object": "list", "data": [{"id": "standin", "object": "model", "owned_by": "kvbake"}]}'


class Head:
    """The API port and the rendezvous port of the head rank."""

    def __init__(self, workers, delay_s):
        self.workers, self.delay_s, self.started = workers, delay_s, time.monotonic()
        self.joined, self.guard = set(), threading.Lock()

    def ready(self):
        with self.guard:
            joined = len(self.joined)
        return not stalled() and time.monotonic() - self.started >= self.delay_s and joined >= self.workers

    def rendezvous(self, port):
        server = listening(port)
        while True:
            conn, _ = server.accept()
            threading.Thread(target=self.keep_worker, args=(conn,), daemon=True).start()

    def keep_worker(self, conn):
        name = conn.recv(256).decode("ascii", "replace").strip()
        with self.guard:
            self.joined.add(name)
        print(f"standin-serve: worker {name} joined", flush=True)
        while conn.recv(1):
            pass
        with self.guard:
            self.joined.discard(name)
        print(f"standin-serve: worker {name} left", flush=True)

    def api(self, port):
        server = listening(port)
        while True:
            conn, _ = server.accept()
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn):
        with conn:
            request = conn.recv(4096).decode("latin-1", "replace")
            path = request.split(" ", 2)[1] if request.count(" ") >= 2 else "/"
            if path == "/health":
                status, body = (b"200 OK", b"ok") if self.ready() else (b"503 Service Unavailable", b"starting")
            elif path == "/v1/models" and self.ready():
                status, body = b"200 OK", MODELS
            else:
                status, body = b"404 Not Found", b"not found"
            conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)


def listening(port):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(16)
    return server


def join_forever(head, port, name):
    while True:
        try:
            with socket.create_connection((head, port), timeout=2) as conn:
                conn.settimeout(None)
                conn.sendall(name.encode("ascii", "replace") + b"\n")
                print(f"standin-serve: joined {head}:{port}", flush=True)
                while conn.recv(1):
                    pass
        except OSError:
            time.sleep(0.2)


def asked(variable):
    """Whether the switch value named in `variable` (NAME=VALUE) is set in this environment."""
    name, _, value = os.environ.get(variable, "").partition("=")
    return bool(name) and os.environ.get(name) == value


def stalled():
    return asked("STANDIN_STALL_IF")


def crash_if_asked():
    if asked("STANDIN_CRASH_IF"):
        name, _, value = os.environ["STANDIN_CRASH_IF"].partition("=")
        print(f"standin-serve: start-up failed: {name}={value} is not supported by this serve", file=sys.stderr, flush=True)
        sys.exit(1)


def main(role, api_port, rendezvous_port, workers, delay_s, head_address, node):
    crash_if_asked()
    signal_stop()
    if role == "worker":
        join_forever(head_address, rendezvous_port, node)
        return
    head = Head(workers, delay_s)
    threading.Thread(target=head.rendezvous, args=(rendezvous_port,), daemon=True).start()
    print(f"standin-serve: head on {api_port}, waiting {delay_s} s and for {workers} worker(s)", flush=True)
    head.api(api_port)


def signal_stop():
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


if __name__ == "__main__":
    role, api, rendezvous, workers, delay, head_address, node = sys.argv[1:8]
    main(role, int(api), int(rendezvous), int(workers), float(delay), head_address, node)
