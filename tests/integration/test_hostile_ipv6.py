"""Integration tests: one IPv6 client is one client for its connections
too. idemd counts a client as an IPv4 address or an IPv6 prefix of
ipv6_client_prefix bits (/64 by default) for the body share and the
unknown-key lookups; max_connections_per_ip caps the connections of such a
client, not of each address (libmicrohttpd's own limit counted each
address apart, so 8 addresses of one /64 held every connection and a
client of another /64 was served 0 times of 5).

Loopback has one IPv6 address, so the test runs in a network namespace of
its own (unshare(CLONE_NEWNET), as root, which CI is; skipped otherwise),
whose loopback holds addresses of two /64s: 2001:db8:a::/64 (the hostile
host, 8 addresses) and 2001:db8:b::/64 (another client). PostgreSQL is
reached over its unix socket, which a network namespace does not hide.
"""

import ctypes
import os
import select
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IdemdCase, free_port  # noqa: E402

CLONE_NEWNET = 0x40000000
HOSTILE = ["2001:db8:a::%x" % i for i in range(1, 9)]
OTHER = "2001:db8:b::1"
SERVER = "2001:db8:c::1"
PER_CLIENT = 8


def setUpModule():
    """Moves this process (its main thread, before any other starts) into a
    network namespace of its own, with the addresses above on its loopback."""
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root for a network namespace of its own")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        raise unittest.SkipTest("unshare(CLONE_NEWNET): %s" % os.strerror(ctypes.get_errno()))
    cmds = [["ip", "link", "set", "lo", "up"]]
    cmds += [["ip", "-6", "addr", "add", a + "/128", "dev", "lo", "nodad"]
             for a in HOSTILE + [OTHER, SERVER]]
    for cmd in cmds:
        subprocess.run(cmd, check=True, capture_output=True)


def hold(source, port):
    """A connection from SOURCE that sends half a request and waits."""
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.settimeout(5)
    s.bind((source, 0))
    s.connect((SERVER, port))
    s.sendall(b"GET /v1/operations HTTP/1.1\r\nHost: x\r\n")
    return s


def still_open(socks, wait):
    """How many of SOCKS idemd has not closed within WAIT seconds."""
    closed = set()
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        ready, _, _ = select.select([s for s in socks if s not in closed], [], [], 0.1)
        for s in ready:
            try:
                if not s.recv(4096):
                    closed.add(s)
            except OSError:
                closed.add(s)
    return len(socks) - len(closed)


def served(source, port):
    """The status of a whole request from SOURCE, or None when refused."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            s.bind((source, 0))
            s.connect((SERVER, port))
            s.sendall(b"GET /v1/operations HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = s.recv(4096)
    except OSError:
        return None
    line = data.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 else None


class ConnectionsPerPrefix(IdemdCase):
    """idemd on [2001:db8:c::1] (its /healthz on an IPv4 admin_listen, which
    the harness polls), 32 connections at most, 8 a client."""

    start_server = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.port6 = free_port()
        cls.idemd.extra_config.update({
            "listen": "[%s]:%d" % (SERVER, cls.port6),
            "admin_listen": "127.0.0.1:%d" % cls.idemd.port,
            "ipv6_client_prefix": 64,
            "max_connections": 4 * PER_CLIENT,
            "max_connections_per_ip": PER_CLIENT,
        })
        cls.idemd.write_config()
        cls.server = cls.idemd.start()

    def test_one_prefix_holds_one_clients_connections(self):
        socks = []
        try:
            # 8 addresses of one /64, 8 connections each: 64, twice
            # max_connections
            for source in HOSTILE:
                for _ in range(PER_CLIENT):
                    try:
                        socks.append(hold(source, self.port6))
                    except OSError:
                        pass
            held = still_open(socks, 1.0)
            self.assertLessEqual(held, PER_CLIENT,
                                 "one /64 holds %d connections, more than one client's %d"
                                 % (held, PER_CLIENT))
            # another client is served every time meanwhile
            statuses = [served(OTHER, self.port6) for _ in range(5)]
            self.assertEqual(statuses.count(401), 5,
                             "another /64 was served %d times of 5 (%r)"
                             % (statuses.count(401), statuses))
        finally:
            for s in socks:
                s.close()
        # the /64's count is given back when its connections close
        time.sleep(0.5)
        self.assertEqual(served(HOSTILE[0], self.port6), 401)
        metrics = self.anon_metrics()
        self.assertIn("idemd_connections_refused_total", metrics)

    def anon_metrics(self):
        with socket.create_connection(("127.0.0.1", self.idemd.port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return data.decode("utf-8", "replace")


if __name__ == "__main__":
    harness.main()
