"""Minimal standalone GGUF (v2/v3) reader for the reference implementation.

Written from the GGUF specification, independently of moeflow's C++ reader, so the
two can check each other. Dequantises F32, F16, BF16, Q8_0, Q4_0 and MXFP4 to float32.
"""
import struct

import numpy as np

GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_BF16, GGML_MXFP4 = 0, 1, 2, 8, 30, 39
# OCP MX FP4 (E2M1) code points 0..7; bit 3 is the sign.
_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class GGUF:
    def __init__(self, path):
        self.path = path
        self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        self.pos = 0
        magic = bytes(self.buf[0:4])
        if magic != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        self.pos = 4
        self.version = self._u32()
        if self.version not in (2, 3):
            raise ValueError(f"{path}: unsupported GGUF version {self.version}")
        n_tensors, n_kv = self._u64(), self._u64()
        self.metadata = {}
        for _ in range(n_kv):
            key = self._str()
            self.metadata[key] = self._value(self._u32())
        align = int(self.metadata.get("general.alignment", 32))
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            nd = self._u32()
            dims = [self._u64() for _ in range(nd)]
            ttype = self._u32()
            off = self._u64()
            infos.append((name, dims, ttype, off))
        data = (self.pos + align - 1) // align * align
        self.tensors = {name: (dims, ttype, data + off) for name, dims, ttype, off in infos}

    def _read(self, fmt):
        n = struct.calcsize(fmt)
        v = struct.unpack(fmt, bytes(self.buf[self.pos:self.pos + n]))[0]
        self.pos += n
        return v

    def _u32(self):
        return self._read("<I")

    def _u64(self):
        return self._read("<Q")

    def _str(self):
        n = self._u64()
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def _value(self, t):
        if t == 8:
            return self._str()
        if t == 9:
            et, n = self._u32(), self._u64()
            return [self._value(et) for _ in range(n)]
        return self._read(_SCALAR[t])

    def tensor(self, name):
        """float32 array shaped like the C array: dims {ne0, ne1, ne2} -> [ne2][ne1][ne0]."""
        dims, ttype, start = self.tensors[name]
        n = int(np.prod(dims))
        if ttype == GGML_F32:
            x = np.frombuffer(self.buf, dtype="<f4", count=n, offset=start).astype(np.float32)
        elif ttype == GGML_F16:
            x = np.frombuffer(self.buf, dtype="<f2", count=n, offset=start).astype(np.float32)
        elif ttype == GGML_BF16:
            raw = np.frombuffer(self.buf, dtype="<u2", count=n, offset=start).astype(np.uint32) << 16
            x = raw.view(np.float32)
        elif ttype == GGML_Q8_0:
            nb = n // 32
            blocks = np.frombuffer(self.buf, dtype=np.uint8, count=nb * 34, offset=start).reshape(nb, 34)
            d = blocks[:, :2].copy().view("<f2").astype(np.float32)
            q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
            x = (d * q).reshape(-1)
        elif ttype == GGML_Q4_0:
            nb = n // 32
            blocks = np.frombuffer(self.buf, dtype=np.uint8, count=nb * 18, offset=start).reshape(nb, 18)
            d = blocks[:, :2].copy().view("<f2").astype(np.float32)
            qs = blocks[:, 2:]
            lo = (qs & 0x0F).astype(np.float32) - 8.0
            hi = (qs >> 4).astype(np.float32) - 8.0
            x = (d * np.concatenate([lo, hi], axis=1)).reshape(-1)
        elif ttype == GGML_MXFP4:
            # 17 bytes per 32 weights: an E8M0 shared exponent (scale 2^(e - 127)), then
            # 16 bytes of E2M1 codes, weight j in the low nibble of byte j, weight j + 16
            # in its high nibble (ggml's block_mxfp4).
            nb = n // 32
            blocks = np.frombuffer(self.buf, dtype=np.uint8, count=nb * 17, offset=start).reshape(nb, 17)
            scale = np.ldexp(1.0, blocks[:, 0].astype(np.int32) - 127)[:, None]
            codes = np.concatenate([blocks[:, 1:] & 0x0F, blocks[:, 1:] >> 4], axis=1)
            mag = _E2M1[codes & 0x07]
            x = (scale * np.where(codes & 0x08, -mag, mag)).reshape(-1).astype(np.float32)
        else:
            raise ValueError(f"{name}: unsupported ggml type {ttype}")
        return x.reshape(list(reversed(dims)))
