"""The connection to a HookScope window or recorder: connect, hello and welcome, a bounded
outbox that never blocks a step (a sender thread writes it while training goes on), and what
the viewer sends back."""

import hashlib
import hmac
import os
import select
import socket
import stat
import struct
import threading
import time

from . import _wire
from ._address import parse_address

HANDSHAKE_SECONDS = 10.0
OUTBOX_LIMIT = 64 << 20  # a viewer this far behind is treated as gone
# A message sent while the sender writes waits for it (up to this long, and only with this little
# queued: what a socket takes at once) so that a step's end is on the wire when step() returns.
SEND_WAIT_SECONDS = 0.1
SEND_WAIT_BYTES = 256 << 10


def _proof(token, side, listener_nonce, script_nonce):
    """HMAC-SHA256 of "hookscope SIDE N1 N2" under the token, hex (core/wire/WireAuth.h)."""
    message = "hookscope %s %s %s" % (side, listener_nonce, script_nonce)
    return hmac.new(token.encode(), message.encode(), hashlib.sha256).hexdigest()


class Refused(Exception):
    """No viewer took this script; the text says why and what to do."""


def _user(uid):
    try:
        import pwd
        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except (ImportError, KeyError):
        return "uid %d" % uid


def _unsafe_folder(path):
    """Why the folder of the Unix socket `path` could hold another user's socket, or None: it
    must be this user's (or root's) and written by no one else unless sticky, as the window and
    the recorder require of the folder they listen in."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        st = os.stat(folder)
    except OSError:
        return None  # nothing listens there: the connect says so
    if st.st_uid not in (os.geteuid(), 0):
        return "its folder %s belongs to %s, not to you" % (folder, _user(st.st_uid))
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return "its folder %s can be written by others (mode %03o)" % (folder, st.st_mode & 0o777)
    return None


def _foreign_peer(sock):
    """Who listens on the connected Unix socket, when not this user: SO_PEERCRED (Linux)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return None if uid == os.geteuid() else "it is listened on by %s, not by you" % _user(uid)


def _untrusted(address, why):
    return Refused("HookScope did not attach to %s: %s, so a window or recorder there may be someone "
                   "else's and nothing was sent to it. Remove that folder (or choose another address: "
                   "HOOKSCOPE_ADDRESS=unix:PATH in a folder of yours, or XDG_RUNTIME_DIR)" % (address, why))


def open_socket(address, wait=False, timeout=None):
    """A socket connected to the address (before the hello: HookScope's engine connects,
    then confines itself, then loads the model and says hello); raises Refused. A Unix socket
    must be in a folder of this user's and listened on by this user, before a byte is sent."""
    try:
        kind, where, _ = parse_address(address)
    except ValueError as exc:
        raise Refused(str(exc)) from None
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        sock = None
        try:
            if kind == "unix":
                unsafe = _unsafe_folder(where)
                if unsafe:
                    raise _untrusted(address, unsafe)
            sock = socket.socket(socket.AF_UNIX if kind == "unix" else socket.AF_INET, socket.SOCK_STREAM)
            sock.settimeout(HANDSHAKE_SECONDS)
            sock.connect(where)
            foreign = _foreign_peer(sock) if kind == "unix" else None
            if foreign:
                sock.close()
                raise _untrusted(address, foreign)
            break
        except OSError as exc:
            if sock is not None:
                sock.close()
            if wait and (deadline is None or time.monotonic() < deadline):
                time.sleep(0.25)
                continue
            raise Refused("no viewer listens at %s (%s). Open File > Attach to a training script in "
                          "HookScope, or run `hookscope-cli record --out DIR`, then set HOOKSCOPE_ADDRESS to "
                          "the address it prints" % (address, exc.strerror or exc)) from None
    return sock


class Connection:
    """A connected socket with an outbox; `on_lost(reason)` is called once if it breaks."""

    def __init__(self, address, on_lost):
        self.address = address
        self._on_lost = on_lost
        self._sock = None
        self._reader = _wire.FrameReader()
        self._outbox = bytearray()
        self.bytes_sent = 0  # on the socket, frame headers included
        # The sender thread takes the whole outbox and writes it (the step goes on meanwhile:
        # a step's end queued more than the socket's buffer takes at once, and only that much
        # went each step until the outbox was so far behind that captures were dropped).
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # the outbox filled, or was written
        self._writing = 0    # bytes the sender took and has not written yet
        self._failed = None  # why the sender stopped writing (said in the training thread)

    @property
    def open(self):
        return self._sock is not None

    @property
    def unsent(self):
        """Bytes not yet written to the socket: how far behind the viewer is."""
        return len(self._outbox) + self._writing

    def connect(self, hello, wait=False, timeout=None, sock=None):
        """Sends `hello` (its token filled in from the address) on `sock` (a new connection when
        None) and returns the welcome and the messages that came with it; raises Refused with
        what to do."""
        try:
            kind, _, token = parse_address(self.address)
        except ValueError as exc:
            raise Refused(str(exc)) from None
        if sock is None:
            sock = open_socket(self.address, wait, timeout)
        try:
            if kind == "tcp":
                refusal = self._prove_token(sock, token)
                if refusal is not None:
                    self._refused(refusal)
            sock.sendall(_wire.json_frame(hello))
            messages = self._await_welcome(sock)
        except Refused:
            sock.close()
            raise
        except (OSError, _wire.ProtocolError, ValueError) as exc:
            sock.close()
            raise Refused("the viewer at %s did not accept this script (%s)" % (self.address, exc)) from None
        if messages[0].get("type") == "error":
            sock.close()
            self._refused(messages[0])
        sock.setblocking(False)
        self._sock = sock
        threading.Thread(target=self._send_loop, args=(sock,), name="hookscope-sender", daemon=True).start()
        return messages

    def _send_loop(self, sock):
        """The sender thread: writes whatever is queued, in order, until the socket is closed
        or fails (then `_failed` says why, and the training thread detaches at its next call)."""
        while True:
            with self._lock:
                while not self._outbox and self._sock is sock:
                    self._changed.wait(0.5)  # woken by queue(); the timeout notices a close
                if self._sock is not sock:
                    return
                data, self._outbox = memoryview(self._outbox), bytearray()
                self._writing = len(data)
            try:
                while data:
                    try:
                        sent = sock.send(data)
                    except (BlockingIOError, InterruptedError):
                        select.select([], [sock], [], 0.5)
                        if self._sock is not sock:
                            return
                        continue
                    data = data[sent:]
                    self._writing = len(data)
            except (OSError, ValueError) as exc:  # ValueError: closed under us
                if self._sock is sock:
                    self._failed = "the viewer went away (%s)" % (getattr(exc, "strerror", None) or exc)
                return
            finally:
                with self._lock:
                    self._writing = len(data) if self._sock is sock and self._failed is None else 0
                    self._changed.notify_all()

    def _refused(self, message):
        raise Refused("the viewer at %s refused this script: %s" % (self.address, message.get("message", "no reason given")))

    def _prove_token(self, sock, token):
        """Over TCP, before the hello: answers the listener's challenge with an HMAC of both
        nonces under the token and checks the listener's own (docs/protocol.md). The token never
        goes on the wire; a listener that cannot prove it gets no hello and is never obeyed.
        Returns the listener's error message when it refused, else None; raises Refused."""
        challenge = self._await_welcome(sock, "the token challenge")[0]
        if challenge.get("type") == "error":
            return challenge
        theirs = challenge.get("nonce")
        if challenge.get("type") != "challenge" or not isinstance(theirs, str) or not 16 <= len(theirs) <= 128:
            raise Refused("the listener at %s sent no token challenge: an older HookScope, or not HookScope; nothing "
                          "was sent to it" % self.address)
        if not token:
            raise Refused("HookScope at %s asks for its token: give the full address it printed "
                          "(tcp://HOST:PORT?token=...) or set HOOKSCOPE_TOKEN" % self.address)
        ours = os.urandom(16).hex()
        sock.sendall(_wire.json_frame({"type": "answer", "nonce": ours,
                                       "mac": _proof(token, "script", theirs, ours)}))
        proof = self._await_welcome(sock, "the listener's proof of the token")[0]
        if proof.get("type") == "error":
            return proof
        mac = proof.get("mac")
        if proof.get("type") != "proof" or not isinstance(mac, str) or \
                not hmac.compare_digest(mac, _proof(token, "listener", theirs, ours)):
            raise Refused("the listener at %s did not prove it knows the token: it is not the HookScope that printed "
                          "this address, so nothing was sent to it and nothing it says is obeyed" % self.address)
        return None

    def _await_welcome(self, sock, what="an answer"):
        deadline = time.monotonic() + HANDSHAKE_SECONDS
        while True:
            messages = self._reader.messages()
            if messages:
                return messages
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OSError("no %s within %.0f s" % (what, HANDSHAKE_SECONDS))
            sock.settimeout(remaining)
            data = sock.recv(65536)
            if not data:
                raise OSError("the viewer closed the connection")
            self._reader.feed(data)
            messages = self._reader.messages()
            if messages:
                return messages  # the welcome (or an error), and what followed it

    def close(self):
        """Closes the socket (the sender thread then ends). Takes no lock: a child forked while
        the sender held it calls this too."""
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _lost(self, reason):
        self.close()
        self._on_lost(reason)

    def queue(self, frame):
        self.bytes_sent += len(frame)
        with self._lock:
            self._outbox += frame
            self._changed.notify_all()  # the sender, and a send() or drain() waiting for it
        self._check()

    def send(self, message):
        """Queues a message and writes what the socket takes of the outbox now, from this thread:
        a small step's end is on the wire when step() returns (a script killed right after it
        leaves that step); the sender thread writes the rest."""
        self.queue(_wire.json_frame(message))
        with self._lock:
            # The sender is writing (the step's captures): under load it may not run again before
            # a script killed right after step() is gone; with a little queued, wait for it to
            # write everything, this message too (it takes it in order).
            if self._writing and self.unsent <= SEND_WAIT_BYTES:
                deadline = time.monotonic() + SEND_WAIT_SECONDS
                while self.unsent and self._sock is not None and self._failed is None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._changed.wait(remaining)
            if self._writing or not self._outbox or self._sock is None:
                return  # the sender is writing: it takes this too, in order
            try:
                sent = self._sock.send(self._outbox)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # the sender meets the same error and says it
            del self._outbox[:sent]

    def drain(self, quiet=5.0, most=60.0):
        """Waits for the sender to write everything queued while the viewer goes on reading: until
        nothing is left, `quiet` seconds pass with nothing more written, or `most` seconds in all.
        Returns the bytes left unsent."""
        started = time.monotonic()
        moved, left = started, self.unsent
        with self._lock:
            while self.unsent and self._sock is not None and self._failed is None:
                now = time.monotonic()
                if self.unsent < left:
                    moved, left = now, self.unsent
                remaining = min(moved + quiet, started + most) - now
                if remaining <= 0:
                    break
                self._changed.wait(min(remaining, 0.25))  # the sender notifies only a whole write's end
        return self.unsent if self._sock is not None and self._failed is None else 0

    def flush(self):
        """Says (detaching) what went wrong since."""
        self._check()

    def _check(self):
        """Detaches, in the training thread, where the sender failed or the viewer is gone."""
        if self._sock is None:
            return
        if self._failed is not None:
            self._lost(self._failed)
        elif self.unsent > OUTBOX_LIMIT:
            self._lost("the viewer stopped reading (%d MiB waiting)" % (self.unsent >> 20))

    def receive(self, timeout=0.0):
        """Messages the viewer sent, waiting up to `timeout` seconds (None: until one comes)."""
        if self._sock is None:
            return []
        self._check()
        if self._sock is None:
            return []
        readable, _, _ = select.select([self._sock], [], [], timeout)
        if not readable or self._sock is None:
            return []
        try:
            data = self._sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError as exc:
            self._lost("the viewer went away (%s)" % (exc.strerror or exc))
            return []
        if not data:
            self._lost("the viewer closed the connection")
            return []
        self._reader.feed(data)
        try:
            return self._reader.messages()
        except _wire.ProtocolError as exc:
            self._lost("the viewer sent a bad message (%s)" % exc)
            return []
