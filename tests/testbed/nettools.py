#!/usr/bin/env python3
"""Small network probes that run *inside* a testbed host namespace.

The testbed starts them with `ip netns exec <ns> python3 nettools.py ...`, so they see only
that namespace's NICs. Standard library only; this machine has no ping or iperf.

  ping ADDR [--iface NIC] [--count N] [--timeout S]
      ICMP echo over a raw socket; exit 0 if any reply came back, 1 otherwise.
      --iface binds the socket to one NIC (SO_BINDTODEVICE) so the probe cannot take
      another rail.
  bcast --iface NIC [--count N] [--port P]
      Send N UDP broadcast datagrams (255.255.255.255) out of one NIC: they reach every NIC
      on that NIC's switch and nothing else, which shows which NICs share a broadcast domain.
  tcprecv --bind ADDR --port P [--timeout S]
      Accept one TCP connection, count bytes until EOF, print one JSON line
      {"bytes": B, "seconds": T} (T from the first byte to EOF). Prints "ready" once listening.
  tcpsend --to ADDR --port P --seconds S [--bind ADDR]
      Send as fast as the socket allows for S seconds, then close; print {"bytes": B}.

Every wait is bounded by a timeout.
"""
import argparse
import json
import os
import socket
import struct
import sys
import time

ICMP_ECHO_REQUEST = 8
ICMP_ECHO_REPLY = 0


def _checksum(data):
    """Internet checksum (RFC 1071) of an ICMP message."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def ping(addr, iface=None, count=1, timeout=1.0):
    """True if `addr` answers one of `count` echo requests, each waited for `timeout` s."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    try:
        if iface:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, iface.encode())
        ident = os.getpid() & 0xFFFF
        for seq in range(1, count + 1):
            head = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, 0, ident, seq)
            body = b"mend-testbed-probe"
            msg = head[:2] + struct.pack("!H", _checksum(head + body)) + head[4:] + body
            try:
                sock.sendto(msg, (addr, 0))
            except OSError:
                # No route or link down on a bound NIC: that attempt failed, wait it out so
                # `count` keeps meaning "attempts spread over count*timeout seconds".
                time.sleep(timeout)
                continue
            sent = time.monotonic()
            if _await_reply(sock, addr, ident, seq, sent + timeout):
                print("reply from %s in %.3f ms" % (addr, (time.monotonic() - sent) * 1e3))
                return True
        return False
    finally:
        sock.close()


def _await_reply(sock, addr, ident, seq, deadline):
    """Wait until `deadline` for the echo reply matching (ident, seq) from `addr`."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            data, src = sock.recvfrom(2048)
        except (socket.timeout, OSError):
            return False
        ihl = (data[0] & 0x0F) * 4
        if len(data) < ihl + 8 or src[0] != addr:
            continue
        kind, _, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
        if kind == ICMP_ECHO_REPLY and rid == ident and rseq == seq:
            return True


def bcast(iface, count=3, port=9):
    """Send `count` UDP broadcasts out of `iface` (port 9: discard)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, iface.encode())
        for _ in range(count):
            sock.sendto(b"mend-testbed-broadcast", ("255.255.255.255", port))
    finally:
        sock.close()


def tcprecv(bind, port, timeout):
    """Receive one stream; return (bytes, seconds from first byte to EOF)."""
    deadline = time.monotonic() + timeout
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((bind, port))
    lsock.listen(1)
    print("ready", flush=True)
    lsock.settimeout(max(0.1, deadline - time.monotonic()))
    conn, _ = lsock.accept()
    lsock.close()
    buf = bytearray(4 << 20)
    total, first, last = 0, None, None
    with conn:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            conn.settimeout(left)
            try:
                got = conn.recv_into(buf)
            except socket.timeout:
                break
            now = time.monotonic()
            if got == 0:
                last = now
                break
            if first is None:
                first = now
            total += got
            last = now
    seconds = (last - first) if (first is not None and last is not None) else 0.0
    return total, seconds


def tcpsend(to, port, seconds, bind=None):
    """Send for `seconds`; return bytes handed to the kernel."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if bind:
        sock.bind((bind, 0))
    sock.settimeout(3.0)
    sock.connect((to, port))
    chunk = b"\xa5" * (1 << 20)
    total = 0
    end = time.monotonic() + seconds
    # A send that cannot progress for a few seconds (rail cut) ends the run instead of hanging.
    sock.settimeout(3.0)
    try:
        while time.monotonic() < end:
            total += sock.send(chunk)
    except socket.timeout:
        pass
    sock.close()
    return total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ping")
    p.add_argument("addr")
    p.add_argument("--iface")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--timeout", type=float, default=1.0)
    b = sub.add_parser("bcast")
    b.add_argument("--iface", required=True)
    b.add_argument("--count", type=int, default=3)
    b.add_argument("--port", type=int, default=9)
    r = sub.add_parser("tcprecv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--timeout", type=float, default=30.0)
    s = sub.add_parser("tcpsend")
    s.add_argument("--to", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--seconds", type=float, default=2.0)
    s.add_argument("--bind")
    args = ap.parse_args(argv)
    if args.cmd == "ping":
        return 0 if ping(args.addr, args.iface, max(1, args.count), args.timeout) else 1
    if args.cmd == "bcast":
        bcast(args.iface, max(1, args.count), args.port)
        return 0
    if args.cmd == "tcprecv":
        nbytes, secs = tcprecv(args.bind, args.port, args.timeout)
        print(json.dumps({"bytes": nbytes, "seconds": secs}), flush=True)
        return 0
    nbytes = tcpsend(args.to, args.port, args.seconds, args.bind)
    print(json.dumps({"bytes": nbytes}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
