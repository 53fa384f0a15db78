"""Writes a dict of float32 torch tensors as a safetensors file (the parity scripts' weights)."""
import json
import struct


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for k, v in tensors.items():
        b = v.numpy().tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
