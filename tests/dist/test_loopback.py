"""A tensor-parallel engine opens no listening socket outside loopback (no TCPStore on every interface)."""
import ipaddress
import os

import pytest

from nanoserve.engine.engine import LLMEngine
from nanoserve.parallel.workers import RankPool

LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp*


def _address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """Decode /proc/net/tcp{,6}'s address column (32-bit words in host byte order, little-endian here)."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def socket_inodes(pid: int) -> set:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def listening_addresses(pids) -> list:
    """(pid, address, port) of every listening TCP socket owned by `pids`."""
    found = []
    for pid in pids:
        inodes = socket_inodes(pid)
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    local, state, inode = cols[1], cols[3], cols[9]
                    if state == LISTEN and inode in inodes:
                        host, port = local.split(":")
                        found.append((pid, _address(host), int(port, 16)))
    return found


def is_loopback(addr) -> bool:
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def test_address_decoding():
    assert _address("0100007F") == ipaddress.ip_address("127.0.0.1")
    assert _address("00000000000000000000000001000000") == ipaddress.ip_address("::1")
    assert not is_loopback(_address("00000000"))  # 0.0.0.0: every interface


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
def test_pool_listens_on_loopback_only():
    with RankPool(2) as pool:
        pids = [os.getpid(), *pool.worker_pids]
        sockets = listening_addresses(pids)
        assert [s for s in sockets if not is_loopback(s[1])] == []
        assert any(pid != os.getpid() for pid, _, _ in sockets)  # the check sees the workers' gloo sockets


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
def test_tp_engine_listens_on_loopback_only(tiny_ckpt):
    engine = LLMEngine.from_args(str(tiny_ckpt), tensor_parallel_size=2, skip_tokenizer_init=True, dtype="float32",
                                 num_kv_blocks=16, block_size=4)
    try:
        sockets = listening_addresses([os.getpid(), *engine.executor.worker_pids])
        assert sockets, "expected gloo's listening sockets"
        assert [s for s in sockets if not is_loopback(s[1])] == []
    finally:
        engine.shutdown()


def test_rendezvous_is_private_and_removed():
    pool = RankPool(2)
    folder = os.path.dirname(pool.store_path)
    assert os.stat(folder).st_mode & 0o077 == 0  # no access for group or others
    pool.close()
    assert not os.path.exists(folder)
