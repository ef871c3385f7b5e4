"""A real authoritative DNS server for tests, on 127.0.0.1 and an ephemeral port (UDP, and TCP
on the same port for answers too long for a datagram), built with dnspython's message API.

It answers TXT questions from `records`, which a test may change at any time:

    server.records["_agentserver-verification.agents.example.test"] = [
        ("agentserver-verification=abc", "def"),  # one record of two strings
        "v=spf1 -all",  # one record of one string
    ]

A name listed with no records exists but holds no TXT record (NOERROR, no answer); a name
not listed does not exist (NXDOMAIN). `silent` drops every question unanswered (a nameserver
that does not answer), `failing` answers SERVFAIL. `nameserver` is the value for the
REGISTRY_DNS_NAMESERVERS setting; `questions` records each question as (name, type, "udp" or
"tcp").
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from typing import Any

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
from dns.rdtypes.ANY.TXT import TXT

Record = str | tuple[str, ...] | list[str]
UDP_LIMIT = 512  # without EDNS, a datagram answer holds at most this much


class DnsServer:
    def __init__(self) -> None:
        self.records: dict[str, list[Record]] = {}
        self.silent = False
        self.failing = False
        self.questions: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        self._udp, self._tcp = self._bind()
        self.port = self._udp.server_address[1]
        self._threads = [
            threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
            for s in (self._udp, self._tcp)
        ]

    @property
    def nameserver(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _bind(self) -> tuple[socketserver.ThreadingUDPServer, socketserver.ThreadingTCPServer]:
        server = self

        class Udp(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                data, sock = self.request
                wire = server.answer(data, "udp")
                if wire is not None:
                    sock.sendto(wire, self.client_address)

        class Tcp(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                while True:
                    head = _read_exactly(sock, 2)
                    if head is None:
                        return
                    data = _read_exactly(sock, struct.unpack("!H", head)[0])
                    if data is None:
                        return
                    wire = server.answer(data, "tcp")
                    if wire is None:
                        return
                    sock.sendall(struct.pack("!H", len(wire)) + wire)

        # TCP must take the UDP server's port number (a resolver asks both on one port): try a
        # few ephemeral ports until one is free for both.
        for _ in range(50):
            udp = socketserver.ThreadingUDPServer(("127.0.0.1", 0), Udp)
            try:
                tcp = socketserver.ThreadingTCPServer(("127.0.0.1", udp.server_address[1]), Tcp)
            except OSError:
                udp.server_close()
                continue
            udp.daemon_threads = tcp.daemon_threads = True
            return udp, tcp
        raise RuntimeError("no port free for both UDP and TCP on 127.0.0.1")

    def answer(self, data: bytes, transport: str) -> bytes | None:
        """The wire answer to one query, or None to stay silent."""
        try:
            query = dns.message.from_wire(data)
        except dns.exception.DNSException:
            return None
        if not query.question:
            return None
        question = query.question[0]
        name = question.name.to_text(omit_final_dot=True).lower()
        with self._lock:
            self.questions.append((name, dns.rdatatype.to_text(question.rdtype), transport))
            if self.silent:
                return None
            failing = self.failing
            records = [tuple([r]) if isinstance(r, str) else tuple(r) for r in self.records.get(name, [])]
            exists = name in self.records
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        if failing:
            response.set_rcode(dns.rcode.SERVFAIL)
        elif not exists:
            response.set_rcode(dns.rcode.NXDOMAIN)
        elif question.rdtype == dns.rdatatype.TXT and records:
            rrset = dns.rrset.RRset(question.name, dns.rdataclass.IN, dns.rdatatype.TXT)
            for strings in records:
                rrset.add(TXT(dns.rdataclass.IN, dns.rdatatype.TXT, [s.encode() for s in strings]), ttl=60)
            response.answer.append(rrset)
        limit = _udp_limit(query) if transport == "udp" else 65535
        try:
            return response.to_wire(max_size=limit)
        except dns.exception.TooBig:
            truncated = dns.message.make_response(query)
            truncated.flags |= dns.flags.AA | dns.flags.TC
            return truncated.to_wire(max_size=limit)

    def start(self) -> DnsServer:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        for server in (self._udp, self._tcp):
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join()


def _udp_limit(query: Any) -> int:
    return max(UDP_LIMIT, query.payload) if query.edns >= 0 else UDP_LIMIT


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data
