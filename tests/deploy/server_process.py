"""A ratelimit-server child process for the deployment script tests.

The server runs with --port_file, its output goes to <work>/server.log, and it is stopped by pid
(SIGTERM, then SIGKILL) by stop(), which the tests call in a `finally`.
"""
import os
import signal
import subprocess
import time


class ServerProcess:
    def __init__(self, server, args, work):
        self.log_path = os.path.join(work, "server.log")
        self.port_file = os.path.join(work, "port")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([server] + args + ["--port_file=" + self.port_file],
                                         stdout=log, stderr=subprocess.STDOUT)

    def wait_for_port(self, deadline_s):
        """The port the server listens on, once it has written it; AssertionError if the server
        exits first or does not write it within `deadline_s` seconds."""
        deadline = time.monotonic() + deadline_s
        while True:
            if self.proc.poll() is not None:
                raise AssertionError("the server exited with %d before listening"
                                     % self.proc.returncode)
            try:
                with open(self.port_file) as f:
                    text = f.read().strip()
                if text:
                    return int(text)
            except FileNotFoundError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("the server did not write its port within %ds" % deadline_s)
            time.sleep(0.05)

    def print_log_tail(self):
        if os.path.exists(self.log_path):
            with open(self.log_path) as f:
                print(f.read()[-4000:])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
