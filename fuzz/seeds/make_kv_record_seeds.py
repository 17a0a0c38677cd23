# Writes the kv_record fuzz target's seeds (valid chained page records, framed as the target reads them; f16 pages of
# rows of 4, and a two-tier cache's q8_0 pages of rows of 32):
#   python3 fuzz/seeds/make_kv_record_seeds.py fuzz/seeds/kv_record [fuzz/seeds/session_state]
import hashlib, struct, zlib, sys, random
L, D, P = 2, 4, 16
model = bytes(32)
def key(parts):
    h = hashlib.sha256()
    for p in parts: h.update(p)
    return h.digest()[:16]
root = key([b"root", model])
def record(parent, tokens, rng):
    k = key([b"page", parent, b"".join(struct.pack("<I", t) for t in tokens)])
    out = b"RVLLMKV\0" + struct.pack("<5I", 1, 1, L, D, P) + model + k + parent
    out += b"".join(struct.pack("<I", t) for t in tokens)
    out += bytes(rng.getrandbits(8) for _ in range(L * 2 * P * D * 2))
    return k, out + struct.pack("<I", zlib.crc32(out))
rng = random.Random(1)
chain, parent = [], root
for i in range(3):
    parent, r = record(parent, [rng.randrange(50000) for _ in range(P)], rng)
    chain.append(r)
def framed(rs): return b"".join(struct.pack("<I", len(r)) + r for r in rs)
open(sys.argv[1] + "/chain3", "wb").write(framed(chain))
open(sys.argv[1] + "/one", "wb").write(framed(chain[:1]))
open(sys.argv[1] + "/gap", "wb").write(framed([chain[0], chain[2]]))

# A saved conversation of 5 tokens for the session_state target (2 layers, rows of 4; memory/state.rs's format):
#   python3 fuzz/seeds/make_kv_record_seeds.py fuzz/seeds/kv_record fuzz/seeds/session_state
if len(sys.argv) > 2:
    n = 5
    out = b"RVLLMST\0" + struct.pack("<5I", 1, 1, L, D, n) + model + b"".join(struct.pack("<I", t) for t in range(n))
    out += bytes(rng.getrandbits(8) for _ in range(L * 2 * n * D * 2))
    open(sys.argv[2] + "/five", "wb").write(out + struct.pack("<I", zlib.crc32(out)))

# Q8_0 pages (a two-tier cache's cold type, ggml type 8) of rows of 32 values: one block of 34 bytes a row; their keys
# start from the root of a q8_0 cache (memory/record.rs, PageKey::root).
D8, Q8_0, Q8_ROW = 32, 8, 34
def record_q8(parent, tokens, rng):
    k = key([b"page", parent, b"".join(struct.pack("<I", t) for t in tokens)])
    out = b"RVLLMKV\0" + struct.pack("<5I", 1, Q8_0, L, D8, P) + model + k + parent
    out += b"".join(struct.pack("<I", t) for t in tokens)
    out += bytes(rng.getrandbits(8) for _ in range(L * 2 * P * Q8_ROW))
    return k, out + struct.pack("<I", zlib.crc32(out))
chain8, parent = [], key([b"root", model, b"q8_0"])
for i in range(2):
    parent, r = record_q8(parent, [rng.randrange(50000) for _ in range(P)], rng)
    chain8.append(r)
open(sys.argv[1] + "/chain2_q8_0", "wb").write(framed(chain8))

# A two-tier conversation of 40 tokens: 32 cold positions (q8_0 rows), then 8 f16 rows, per layer keys then values.
if len(sys.argv) > 2:
    n, cold = 40, 32
    out = b"RVLLMST\0" + struct.pack("<5I", 1, Q8_0, L, D8, n) + model + b"".join(struct.pack("<I", t) for t in range(n))
    out += struct.pack("<I", cold)
    out += bytes(rng.getrandbits(8) for _ in range(L * 2 * (cold * Q8_ROW + (n - cold) * D8 * 2)))
    open(sys.argv[2] + "/forty_q8_0", "wb").write(out + struct.pack("<I", zlib.crc32(out)))
