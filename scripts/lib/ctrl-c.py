"""ctrl-c.py LOG WHEN COMMAND...: runs COMMAND on a terminal of its own, as a user
runs it in the foreground, and types Ctrl-C there (the terminal sends SIGINT to its
foreground process group, not to one process) once WHEN holds: `ready`, a line of the
output starting with "ready "; any other WHEN, a path that exists. The output goes to
LOG; exits with COMMAND's status, or 99 when WHEN never held (within 300 s)."""
import os
import pty
import select
import sys
import time

log_path, when, command = sys.argv[1], sys.argv[2], sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(command[0], command)
seen, typed, end = b"", False, time.time() + 300
with open(log_path, "wb") as log:
    while time.time() < end:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                data = os.read(fd, 4096)
            except OSError:  # the terminal is gone: the command ended
                break
            if not data:
                break
            log.write(data.replace(b"\r\n", b"\n"))
            log.flush()
            seen += data
        due = b"\nready " in seen if when == "ready" else os.path.exists(when)
        if due and not typed:
            os.write(fd, b"\x03")
            typed = True
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status) if typed else 99)
