"""A stand-in server for the launch tests: answers GET /health with 200 on 127.0.0.1:PORT.

`--child PIDFILE` first starts a child process of its own (a worker) and writes its pid there;
`--ignore-term` ignores SIGTERM, so only the SIGKILL after the grace stops it.
"""

from __future__ import annotations

import argparse
import http.server
import signal
import subprocess
import sys


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--child")
    parser.add_argument("--ignore-term", action="store_true")
    args = parser.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.child:
        worker = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                                   "signal.SIG_IGN); time.sleep(120)"])
        with open(args.child, "w") as out:
            out.write(str(worker.pid))
    print(f"fake server on {args.port}", flush=True)
    http.server.HTTPServer(("127.0.0.1", args.port), Health).serve_forever()


if __name__ == "__main__":
    main()
