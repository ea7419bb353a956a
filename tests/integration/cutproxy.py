#!/usr/bin/env python3
"""cutproxy.py LISTEN_PORT TARGET_PORT - a loopback TCP proxy a test can cut.

  SIGUSR1  cut: stop moving bytes both ways, keep every connection open (a
           silent network partition: nothing arrives, nothing is refused);
           new connections are accepted and held the same way; prints "cut"
  SIGUSR2  heal: move bytes again (what was sent meanwhile is delivered);
           prints "healed"
  SIGHUP   drop: close every connection now (the peers see them closed);
           new connections are forwarded as before (answers too)
  SIGWINCH lose answers: requests still reach the target, and what it
           sends back is thrown away (an answer lost after the work was
           done) until the next SIGHUP; prints "answers lost". The first 8
           bytes of each connection (the SP handshake) still pass, so a
           connection made meanwhile opens and its requests arrive

Prints "ready" once listening. Used by tests/integration/nodes/*.sh.
"""
import select
import signal
import socket
import sys
import threading

listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
cut = threading.Event()
mute = threading.Event()  # answers (target -> client) are thrown away
lock = threading.Lock()
conns = []


HANDSHAKE = 8  # nng's SP-over-TCP header, sent by each side first


def pump(a, b, answers=False):
    sent = 0
    try:
        while True:
            if cut.is_set():
                cut_wait.wait(0.05)
                continue
            r, _, _ = select.select([a], [], [], 0.05)
            if not r or cut.is_set():
                continue
            data = a.recv(65536)
            if not data:
                break
            if answers and mute.is_set():
                data = data[:max(0, HANDSHAKE - sent)]
            sent += len(data)
            b.sendall(data)
    except (OSError, ValueError):  # ValueError: closed by drop() meanwhile
        pass
    for s in (a, b):
        try:
            s.close()
        except OSError:
            pass


cut_wait = threading.Event()  # never set: a sleep that signals cannot shorten


def serve(client):
    try:
        up = socket.create_connection(("127.0.0.1", target_port))
    except OSError:
        client.close()
        return
    with lock:
        conns.append((client, up))
    threading.Thread(target=pump, args=(client, up), daemon=True).start()
    threading.Thread(target=pump, args=(up, client, True), daemon=True).start()


def drop(*_):
    with lock:
        for pair in conns:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        conns.clear()
        mute.clear()


def lose_answers(*_):
    mute.set()
    print("answers lost", flush=True)


def set_cut(on):
    if on:
        cut.set()
    else:
        cut.clear()
    print("cut" if on else "healed", flush=True)


signal.signal(signal.SIGUSR1, lambda *_: set_cut(True))
signal.signal(signal.SIGUSR2, lambda *_: set_cut(False))
signal.signal(signal.SIGHUP, drop)
signal.signal(signal.SIGWINCH, lose_answers)

ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", listen_port))
ls.listen(64)
print("ready", flush=True)
while True:
    try:
        c, _ = ls.accept()
    except InterruptedError:
        continue
    threading.Thread(target=serve, args=(c,), daemon=True).start()
