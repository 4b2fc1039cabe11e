"""RFC 6962 hashing, the compact range and proofs against the published test vectors, and every
proof we build checked by an independent verifier written here from the RFC 6962 text.

Vectors: transparency-dev/merkle, `proof/verify_test.go` (commit 02194e9afb6c1d95b5381350007963aa70fff472:
`leaves`, `roots`, `inclusionProofs`, `consistencyProofs`) and `rfc6962/rfc6962_test.go`
(commit 78493b07ef9b552e3379abf9e23d4da26fbe797c: the empty root, empty leaf, leaf and node
hashes). The same values are in certificate-transparency-go's merkletree tests."""

from __future__ import annotations

from hashlib import sha256

import pytest
from hypothesis import given
from hypothesis import strategies as st

from precast.audit.compact import CompactRange
from precast.audit.hashing import EMPTY_ROOT, leaf_hash, node_hash, root_of
from precast.audit.proofs import (
    STRIDE,
    ProofError,
    Prover,
    verify_consistency,
    verify_inclusion,
)

h = bytes.fromhex

LEAVES = [
    b"",
    h("00"),
    h("10"),
    h("2021"),
    h("3031"),
    h("40414243"),
    h("5051525354555657"),
    h("606162636465666768696a6b6c6d6e6f"),
]
ROOTS = [
    h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
    h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"),
    h("aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77"),
    h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
    h("4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4"),
    h("76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef"),
    h("ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c"),
    h("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"),
]
# (leaf index as in the Go file, 1-based; tree size; proof)
INCLUSION = [
    (1, 1, []),
    (
        1,
        8,
        [
            h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ],
    ),
    (
        6,
        8,
        [
            h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
            h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
    (3, 3, [h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")]),
    (
        2,
        5,
        [
            h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        ],
    ),
]
CONSISTENCY = [
    (1, 1, []),
    (1, 8, [
        h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
        h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
        h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
    ]),
    (6, 8, [
        h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
        h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
        h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
    ]),
    (2, 5, [
        h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
        h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
    ]),
    (6, 7, [
        h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
        h("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
        h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
    ]),
]  # fmt: skip


class MemorySource:
    """Leaf hashes and the stride-level inner nodes, as the SQLite store keeps them."""

    def __init__(self, hashes: list[bytes]) -> None:
        self.hashes = hashes
        nodes: list[tuple[int, int, bytes]] = []
        CompactRange().extend(hashes, nodes)
        self.nodes = {(lvl, i): x for lvl, i, x in nodes}

    def leaf_hashes(self, lo: int, hi: int) -> list[bytes]:
        return self.hashes[lo:hi]

    def node_hashes(self, level: int, lo: int, hi: int) -> list[bytes]:
        return [self.nodes[(level, i)] for i in range(lo, hi) if (level, i) in self.nodes]


# -- an independent verifier, from RFC 6962 §2.1 (recursive definitions, not RFC 9162's loop) --
def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def rfc_mth(leaves: list[bytes]) -> bytes:
    """MTH(D[n]) exactly as §2.1 defines it, from leaf data."""
    if not leaves:
        return sha256(b"").digest()
    if len(leaves) == 1:
        return sha256(b"\x00" + leaves[0]).digest()
    k = _k(len(leaves))
    return sha256(b"\x01" + rfc_mth(leaves[:k]) + rfc_mth(leaves[k:])).digest()


def rfc_root_from_path(m: int, n: int, leaf: bytes, path: list[bytes]) -> bytes:
    """PATH(m, D[n]) = PATH(m, D[0:k]) : MTH(D[k:n]) for m < k, else PATH(m - k, D[k:n]) :
    MTH(D[0:k]): the last element is the sibling of the top split."""
    if n == 1:
        assert not path, "path too long"
        return leaf
    assert path, "path too short"
    k = _k(n)
    if m < k:
        return sha256(b"\x01" + rfc_root_from_path(m, k, leaf, path[:-1]) + path[-1]).digest()
    return sha256(b"\x01" + path[-1] + rfc_root_from_path(m - k, n - k, leaf, path[:-1])).digest()


def rfc_roots_from_subproof(
    m: int, n: int, proof: list[bytes], whole: bool, old_root: bytes
) -> tuple[bytes, bytes]:
    """(MTH(D[0:m]), MTH(D[0:n])) from SUBPROOF(m, D[n], b) of §2.1.2."""
    if m == n:
        if whole:
            assert not proof, "proof too long"
            return old_root, old_root
        assert len(proof) == 1, "proof length"
        return proof[0], proof[0]
    assert proof, "proof too short"
    k = _k(n)
    if m <= k:
        old, new = rfc_roots_from_subproof(m, k, proof[:-1], whole, old_root)
        return old, sha256(b"\x01" + new + proof[-1]).digest()
    old, new = rfc_roots_from_subproof(m - k, n - k, proof[:-1], False, old_root)
    return (
        sha256(b"\x01" + proof[-1] + old).digest(),
        sha256(b"\x01" + proof[-1] + new).digest(),
    )


# -- vectors ----------------------------------------------------------------------------------------
def test_hash_vectors():
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert leaf_hash(b"").hex() == (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    )
    assert leaf_hash(b"L123456").hex() == (
        "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56"
    )
    assert node_hash(b"N123", b"N456").hex() == (
        "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb"
    )


@pytest.mark.parametrize("n", range(1, 9))
def test_roots_of_the_vector_leaves(n):
    hashes = [leaf_hash(x) for x in LEAVES[:n]]
    tree = CompactRange()
    tree.extend(hashes)
    assert root_of(hashes) == tree.root() == ROOTS[n - 1] == rfc_mth(LEAVES[:n])


@pytest.mark.parametrize(("leaf", "size", "proof"), INCLUSION)
def test_inclusion_vectors(leaf, size, proof):
    prover = Prover(MemorySource([leaf_hash(x) for x in LEAVES[:size]]))
    assert prover.inclusion(leaf - 1, size) == proof
    verify_inclusion(leaf - 1, size, leaf_hash(LEAVES[leaf - 1]), proof, ROOTS[size - 1])
    bad_leaf = leaf_hash(b"WrongLeaf")
    with pytest.raises(ProofError):
        verify_inclusion(leaf - 1, size, bad_leaf, proof, ROOTS[size - 1])
    for i in range(len(proof)):  # one flipped bit anywhere in the proof
        wrong = [bytes([p[0] ^ 8]) + p[1:] if j == i else p for j, p in enumerate(proof)]
        with pytest.raises(ProofError):
            verify_inclusion(leaf - 1, size, leaf_hash(LEAVES[leaf - 1]), wrong, ROOTS[size - 1])
    with pytest.raises(ProofError):  # trailing garbage
        verify_inclusion(
            leaf - 1, size, leaf_hash(LEAVES[leaf - 1]), [*proof, ROOTS[0]], ROOTS[size - 1]
        )


@pytest.mark.parametrize(("size1", "size2", "proof"), CONSISTENCY)
def test_consistency_vectors(size1, size2, proof):
    prover = Prover(MemorySource([leaf_hash(x) for x in LEAVES[:size2]]))
    assert prover.consistency(size1, size2) == proof
    verify_consistency(size1, size2, ROOTS[size1 - 1], ROOTS[size2 - 1], proof)
    if proof:
        with pytest.raises(ProofError):
            verify_consistency(size1, size2, ROOTS[size2 - 1], ROOTS[size1 - 1], proof)
        with pytest.raises(ProofError):
            verify_consistency(size1, size2, ROOTS[size1 - 1], ROOTS[size2 - 1], proof[:-1])
        for i in range(len(proof)):
            wrong = [bytes([p[0] ^ 16]) + p[1:] if j == i else p for j, p in enumerate(proof)]
            with pytest.raises(ProofError):
                verify_consistency(size1, size2, ROOTS[size1 - 1], ROOTS[size2 - 1], wrong)


def test_trivial_consistency_cases():
    a, b = ROOTS[0], ROOTS[1]
    verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])
    verify_consistency(0, 5, EMPTY_ROOT, b, [])
    verify_consistency(1, 1, a, a, [])
    for args in [(1, 1, a, b, []), (2, 1, a, b, []), (1, 2, a, b, []), (1, 1, a, a, [a])]:
        with pytest.raises(ProofError):
            verify_consistency(*args)


# -- every proof, checked by the independent verifier ----------------------------------------------
def _data(n: int) -> list[bytes]:
    return [f"leaf {i}".encode() for i in range(n)]


def test_all_small_trees_against_the_rfc_text():
    for n in range(1, 40):
        data = _data(n)
        hashes = [leaf_hash(x) for x in data]
        prover = Prover(MemorySource(hashes))
        root = rfc_mth(data)
        assert root_of(hashes) == root
        for m in range(n):
            path = prover.inclusion(m, n)
            assert rfc_root_from_path(m, n, hashes[m], path) == root
            verify_inclusion(m, n, hashes[m], path, root)
        for m in range(1, n):
            proof = prover.consistency(m, n)
            old = rfc_mth(data[:m])
            assert rfc_roots_from_subproof(m, n, proof, True, old) == (old, root)
            verify_consistency(m, n, old, root, proof)


@given(st.data())
def test_large_trees_use_stored_levels(data):
    """Trees past 2^STRIDE and 2^(2*STRIDE) leaves: proofs rebuilt from the stored inner nodes
    agree with the RFC definitions."""
    n = data.draw(st.integers(1 << STRIDE, 70_000), label="size")
    hashes = _HASHES[:n]
    source = MemorySource(hashes)
    prover = Prover(source)
    root = root_of(hashes)
    m = data.draw(st.integers(0, n - 1), label="leaf")
    path = prover.inclusion(m, n)
    assert rfc_root_from_path(m, n, hashes[m], path) == root
    size1 = data.draw(st.integers(1, n), label="size1")
    proof = prover.consistency(size1, n)
    old = root_of(hashes[:size1])
    if size1 < n:
        assert rfc_roots_from_subproof(size1, n, proof, True, old) == (old, root)
    verify_consistency(size1, n, old, root, proof)


_HASHES = [leaf_hash(x) for x in _data(70_000)]


def test_compact_range_survives_a_round_trip():
    tree = CompactRange()
    tree.extend(_HASHES[:1234])
    again = CompactRange.from_bytes(1234, tree.to_bytes())
    again.extend(_HASHES[1234:5000])
    assert again.root() == root_of(_HASHES[:5000])
    with pytest.raises(ValueError):
        CompactRange(3, [EMPTY_ROOT])


def test_proofs_refuse_impossible_requests():
    prover = Prover(MemorySource(_HASHES[:10]))
    with pytest.raises(ProofError):
        prover.inclusion(10, 10)
    with pytest.raises(ProofError):
        prover.consistency(11, 10)
    with pytest.raises(ProofError):  # the store lacks what a larger tree needs
        prover.inclusion(3, 20)
