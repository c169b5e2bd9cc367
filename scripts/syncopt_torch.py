#!/usr/bin/env python3
"""A model trained by syncopt, in PyTorch: the nn.Module that `syncopt export
RUN --safetensors` describes, loaded with its weights.

    import sys; sys.path.insert(0, "scripts")
    import syncopt_torch
    model, prep = syncopt_torch.load("runs/fmnist-sync/export/model_ema.safetensors")
    model.eval()
    logits = model(prep(images))     # images: N x C x H x W, pixels scaled as syncopt reads them

The file holds the tensors (PyTorch's names and layouts: <layer>.weight as
[out, in, kH, kW] or [out, in], <layer>.bias, batch norm's weight, bias,
running_mean, running_var, num_batches_tracked) and, in its metadata,
the layer graph (syncopt.graph) and the input standardisation
(syncopt.input_mean, syncopt.input_std: per channel, of the training set).
Weight normalisation is folded (w = g v / ||v||): the module is a plain one.
build() makes the module from the graph alone, for any model syncopt trains
(the built-in ones and [[model.layers]]); prep() standardises images as
syncopt does (uint8 pixels divided by 255 first). Needs torch and
safetensors (pip install torch safetensors).
"""
import json

import torch
from torch import nn


class SyncoptNet(nn.Module):
    """The layer graph as modules, run in the graph's order."""

    def __init__(self, graph):
        super().__init__()
        self.graph = graph
        self.layers = nn.ModuleDict()
        for node in graph["nodes"]:
            m = _module(node)
            if m is not None:
                self.layers[node["name"]] = m

    def forward(self, x):
        outs = []
        for node in self.graph["nodes"]:
            ins = [x if i < 0 else outs[i] for i in node["inputs"]]
            t, h = node["type"], ins[0]
            if t == "add":
                y = ins[0] + ins[1]
            elif t == "flatten":
                y = torch.flatten(h, 1)
            elif t == "relu":
                y = torch.relu(h)
            elif t == "gelu":
                y = nn.functional.gelu(h)
            elif t == "fc":
                y = self.layers[node["name"]](torch.flatten(h, 1))
            else:
                y = self.layers[node["name"]](h)
            if node.get("relu"):
                y = torch.relu(y)
            outs.append(y)
        return outs[-1]


def _module(node):
    t = node["type"]
    if t == "conv":
        return nn.Conv2d(node["in"][0], node["out"][0], node["kernel"], node["stride"], node["pad"],
                         bias=node["bias"])
    if t == "fc":
        return nn.Linear(node["fan_in"], node["out"][0], bias=node["bias"])
    if t == "bn":
        return nn.BatchNorm2d(node["out"][0], eps=node["eps"])
    if t == "maxpool":
        return nn.MaxPool2d(node["kernel"], node["stride"], node["pad"])
    if t == "avgpool":
        return nn.AvgPool2d(node["kernel"], node["stride"], node["pad"])
    if t == "gap":
        return nn.AdaptiveAvgPool2d(1)
    if t == "dropout":
        return nn.Dropout(node["rate"])
    return None  # relu, add, flatten, gelu: no module


def build(graph):
    """The module of a syncopt.graph (a dict, or its JSON text)."""
    if isinstance(graph, str):
        graph = json.loads(graph)
    return SyncoptNet(graph)


def prep_of(metadata):
    """images -> standardised float32, as syncopt feeds its network."""
    mean = torch.tensor(json.loads(metadata["syncopt.input_mean"])).view(1, -1, 1, 1)
    std = torch.tensor(json.loads(metadata["syncopt.input_std"])).view(1, -1, 1, 1)

    def prep(images):
        x = torch.as_tensor(images)
        if x.dtype == torch.uint8:
            x = x.float() / 255.0
        if x.dim() == 3:
            x = x.unsqueeze(1)
        return (x.float() - mean) / std
    return prep


def load(path):
    """(module with the file's weights, strict; prep) of an exported file."""
    from safetensors import safe_open
    from safetensors.torch import load_file
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    model = build(meta["syncopt.graph"])
    state = {"layers." + k: v for k, v in load_file(path).items()}
    model.load_state_dict(state, strict=True)
    return model, prep_of(meta)
