"""Inside a sandbox without network: listen on ``127.0.0.1:PORT`` for each ``PORT=SOCKET`` argument, relay each
connection to the unix socket ``SOCKET`` (which the host relays on to its own loopback port, and only that one),
and run the program after ``--``; exit with its exit code. Run with ``python -I -S`` (the standard library only).
"""

import os
import signal
import socket
import subprocess
import sys
import threading


def pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


def main() -> int:
    split = sys.argv.index("--")
    for spec in sys.argv[1:split]:
        port, _, path = spec.partition("=")
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            listener = socket.socket(family, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind((host, int(port)))
            except OSError:  # no IPv6 loopback in this sandbox
                listener.close()
                continue
            listener.listen(64)
            threading.Thread(target=serve, args=(listener, path), daemon=True).start()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    child = subprocess.Popen(sys.argv[split + 1 :], restore_signals=True)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, f: child.send_signal(s))
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    os._exit(main())
