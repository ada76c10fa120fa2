"""Child processes: stopping one, and reading its output line by line."""

import os
import signal
import subprocess


def stop(proc, sig=signal.SIGTERM, grace=5, group=False):
    """Sends `sig` to proc unless it has ended; SIGKILL (to its whole process group with group=True: proc started a
    session of its own) if it has not ended `grace` s later."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait()


class Lines:
    """Turns chunks of bytes into lines: on_line(text) per complete line, without its end; end() passes on a last
    unterminated one."""

    def __init__(self, on_line):
        self.on_line = on_line
        self.pending = b""

    def __call__(self, data):
        *lines, self.pending = (self.pending + data).split(b"\n")
        for line in lines:
            self.on_line(line.decode(errors="replace"))

    def end(self):
        if self.pending:
            self.on_line(self.pending.decode(errors="replace"))
            self.pending = b""
