"""Shared pieces of the weight-sync spec generators: meshes with one process
per GPU and contiguous hosts, tensors, and the spec file (docs/spec.md)."""
import json


class SpecBuilder:
    """A reshard spec: meshes over global device ids (one process per device,
    host = device // per_host), tensors with source and destination layouts."""

    def __init__(self, description, per_host):
        self.description = description
        self.per_host = per_host
        self.meshes = {}
        self.tensors = []
        self.options = {}

    def mesh(self, name, axes, shape, first_device):
        n = 1
        for s in shape:
            n *= s
        devices = list(range(first_device, first_device + n))
        self.meshes[name] = {"axis_names": list(axes), "shape": list(shape), "devices": devices,
                             "processes": devices,
                             "hosts": [d // self.per_host for d in devices]}
        return name

    def tensor(self, name, shape, src, dst, dtype="bf16"):
        """src, dst: (mesh name, spec list)."""
        self.tensors.append({"name": name, "shape": list(shape), "dtype": dtype,
                             "src": {"mesh": src[0], "spec": list(src[1])},
                             "dst": {"mesh": dst[0], "spec": list(dst[1])}})

    def params(self):
        total = 0
        for t in self.tensors:
            n = 1
            for s in t["shape"]:
                n *= s
            total += n
        return total

    def doc(self):
        d = {"description": self.description, "meshes": self.meshes, "tensors": self.tensors}
        if self.options:
            d["options"] = self.options
        return d

    def write(self, path):
        with open(path, "w") as f:
            json.dump(self.doc(), f, separators=(",", ":"))


def stage_of(layer, layers, stages):
    """Pipeline stage of a layer: contiguous, as even as the division allows."""
    return layer * stages // layers
