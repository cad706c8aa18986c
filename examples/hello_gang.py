"""Ferry hello-gang: proves the ranks of a gang can reach each other.

Every rank prints its distributed environment, then connects to MASTER_ADDR:MASTER_PORT;
rank 0 listens there, collects every rank's RANK and prints the sorted list, e.g.
[0, 1, 2, 3]. Exits non-zero if the gang cannot assemble within 60 seconds.
"""

import os
import socket
import sys
import time

KEYS = ["MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "NPROC_PER_NODE",
        "WORLD_SIZE", "RANK", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "FERRY_JOB", "FERRY_ATTEMPT"]
TIMEOUT_S = 60.0


def read_line(conn):
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            break
        data += chunk
    return data.decode().strip()


def main():
    for key in KEYS:
        print(f"{key}={os.environ.get(key, '<unset>')}", flush=True)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    addr = os.environ["MASTER_ADDR"]
    port = int(os.environ["MASTER_PORT"])
    if rank == 0:
        server = socket.create_server((addr, port))
        server.settimeout(TIMEOUT_S)
        ranks = [0]
        while len(ranks) < world:
            conn, _ = server.accept()
            with conn:
                ranks.append(int(read_line(conn)))
                conn.sendall(b"ok\n")
        print(sorted(ranks), flush=True)
        return 0
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                print(f"rank {rank}: no rank 0 at {addr}:{port}", file=sys.stderr)
                return 1
            time.sleep(0.05)
    with conn:
        conn.sendall(f"{rank}\n".encode())
        reply = read_line(conn)
    print(f"rank {rank} reported to rank 0: {reply}", flush=True)
    return 0 if reply == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
