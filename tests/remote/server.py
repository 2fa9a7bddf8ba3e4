#!/usr/bin/env python3
"""A scripted OpenAI-compatible server for the remote generator's tests, on 127.0.0.1 only.

Prints "PORT <n>" on stdout once listening (an ephemeral port), and exits when stdin closes
(the test that started it ended) or after --lifetime seconds. Control endpoints:
  POST /__next   {"fixture": "vllm_plain.sse", "mode": ..., ...}: queue the reply of the next
                 POST /v1/chat/completions. Modes:
                   whole      the fixture in one write (chunked encoding)
                   bytewise   one byte per HTTP chunk, each flushed (TCP_NODELAY)
                   stall      "stall_after" bytes of it, then nothing until the client leaves
                              (the time it left is logged as "closed_at", time.monotonic())
                   cut        "cut_after" bytes, then the connection drops without the last
                              chunk (a broken chunked stream)
                   eof        "cut_after" bytes without chunked encoding, then a clean close
                   status     HTTP "status" with the body of "fixture" (a JSON file)
                   json200    200 with Content-Type application/json and the fixture
                   slam       close the connection before any reply (a failed try)
                   flood      content chunks of 4 KiB without end, until the client leaves or
                              "flood_bytes" (default 64 MiB) were sent (a hostile server)
                 "delay" seconds before the reply's headers (default 0).
  GET  /__log    the chat requests so far: [{"path", "headers", "body", "closed_at"}]
  GET  /v1/models  {"data": [{"id": "kimi-k2.5-test", "max_model_len": 262144}]}
"""
import json
import os
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
queue = []
log = []
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/__log":
            with lock:
                self.reply(200, json.dumps(log))
        elif self.path == "/v1/models":
            self.reply(200, json.dumps({"object": "list", "data": [
                {"id": "kimi-k2.5-test", "object": "model", "owned_by": "vllm", "max_model_len": 262144},
                {"id": "other-model", "object": "model", "owned_by": "vllm"}]}))
        else:
            self.reply(404, json.dumps({"detail": "Not Found"}))

    def read_body(self):
        n = int(self.headers.get("Content-Length", "0"))
        return self.rfile.read(n) if n else b""

    def chunk(self, data):
        self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
        self.wfile.flush()

    def wait_for_close(self, entry):
        """Block until the client closes its end; log when."""
        self.connection.setblocking(True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.connection], [], [], 0.002)
            if r:
                try:
                    got = self.connection.recv(4096)
                except OSError:
                    got = b""
                if not got:
                    break
        with lock:
            entry["closed_at"] = time.monotonic()

    def do_POST(self):
        body = self.read_body()
        if self.path == "/__next":
            with lock:
                queue.append(json.loads(body))
            self.reply(200, "{}")
            return
        if not self.path.endswith("/chat/completions"):
            self.reply(404, json.dumps({"detail": "Not Found"}))
            return
        entry = {"path": self.path, "headers": dict(self.headers.items()),
                 "body": body.decode("utf-8", "replace"), "closed_at": None}
        with lock:
            log.append(entry)
            step = queue.pop(0) if queue else {"fixture": "vllm_plain.sse", "mode": "whole"}
        mode = step.get("mode", "whole")
        if mode == "slam":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        time.sleep(step.get("delay", 0))
        data = open(os.path.join(HERE, step["fixture"]), "rb").read() if "fixture" in step else b""
        if mode == "status":
            self.reply(step["status"], data)
            return
        if mode == "json200":
            self.reply(200, data)
            return
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        if mode == "eof":
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data[:step["cut_after"]])
            self.wfile.flush()
            self.close_connection = True
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if mode == "whole":
            self.chunk(data)
        elif mode == "bytewise":
            for i in range(len(data)):
                self.chunk(data[i:i + 1])
        elif mode == "stall":
            if step.get("stall_after", 0):
                self.chunk(data[:step["stall_after"]])
            self.wait_for_close(entry)
            self.close_connection = True
            return
        elif mode == "flood":
            piece = json.dumps({"choices": [{"index": 0, "delta": {"content": "x" * 4096}}]})
            event = ("data: " + piece + "\n\n").encode()
            try:
                for _ in range(step.get("flood_bytes", 64 << 20) // 4096):
                    self.chunk(event)
            except OSError:     # the client left, as it should
                pass
            self.close_connection = True
            return
        elif mode == "cut":
            self.chunk(data[:step["cut_after"]])
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):   # a client that left is a test's doing
            super().handle_error(request, client_address)


def main():
    lifetime = float(sys.argv[sys.argv.index("--lifetime") + 1]) if "--lifetime" in sys.argv else 120
    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("PORT %d" % server.server_address[1], flush=True)
    stop = threading.Event()

    def watch_stdin():
        try:
            while sys.stdin.buffer.read(1):
                pass
        except OSError:
            pass
        stop.set()
    threading.Thread(target=watch_stdin, daemon=True).start()
    stop.wait(lifetime)
    os._exit(0)


if __name__ == "__main__":
    main()
