"""Trained classifiers -> ONNX, bound to the fleet spec.

- An sklearn `MLPClassifier` is written from its weights with standard ONNX ops only (Sub, Div,
  MatMul, Add, Relu, Softmax): skl2onnx would emit `ai.onnx.ml` ops (Scaler, ZipMap,
  ArrayFeatureExtractor) that the CUDA and TensorRT providers do not run, forcing CPU fallbacks
  and copies in the middle of the graph.
- Any other sklearn classifier goes through skl2onnx (without ZipMap: one probability tensor),
  LightGBM and XGBoost through onnxmltools; those graphs hold `ai.onnx.ml` tree ensembles and run
  on the CPU provider (docs/models.md).
Every graph gets the spec binding in its `metadata_props` (workers.model.manifest).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from precast.fleet import Fleet
from workers.model.manifest import metadata_props

INPUT_NAME = "features"
OUTPUT_NAME = "probabilities"


def mlp_to_onnx(
    name: str,
    mean: np.ndarray,
    scale: np.ndarray,
    coefs: list[np.ndarray],
    intercepts: list[np.ndarray],
    opset: int = 17,
) -> Any:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(mean.astype(np.float32), "mean"),
        numpy_helper.from_array(scale.astype(np.float32), "scale"),
    ]
    nodes = [
        helper.make_node("Sub", [INPUT_NAME, "mean"], ["centered"]),
        helper.make_node("Div", ["centered", "scale"], ["h0"]),
    ]
    last = "h0"
    for i, (w, b) in enumerate(zip(coefs, intercepts, strict=True)):
        inits += [
            numpy_helper.from_array(w.astype(np.float32), f"W{i}"),
            numpy_helper.from_array(b.astype(np.float32), f"b{i}"),
        ]
        nodes += [
            helper.make_node("MatMul", [last, f"W{i}"], [f"mm{i}"]),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"z{i}"]),
        ]
        last = f"z{i}"
        if i < len(coefs) - 1:
            nodes.append(helper.make_node("Relu", [last], [f"a{i}"]))
            last = f"a{i}"
    nodes.append(helper.make_node("Softmax", [last], [OUTPUT_NAME], axis=-1))
    n_out = coefs[-1].shape[1]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", len(mean)])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", n_out])],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="precast.workers.training",
    )
    model.ir_version = 8  # readable by every onnxruntime >= 1.14
    onnx.checker.check_model(model)
    return model


def sklearn_to_onnx(clf: Any, n_features: int) -> tuple[Any, str]:
    """(model, output name) of any sklearn classifier through skl2onnx, probabilities as one
    tensor (no ZipMap)."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType

    model = to_onnx(
        clf,
        initial_types=[(INPUT_NAME, FloatTensorType([None, n_features]))],
        options={id(clf): {"zipmap": False}},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    return model, _probability_output(model)


def lightgbm_to_onnx(clf: Any, n_features: int) -> tuple[Any, str]:
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType

    model = convert_lightgbm(
        clf,
        initial_types=[(INPUT_NAME, FloatTensorType([None, n_features]))],
        zipmap=False,
        target_opset=15,  # the newest onnxmltools converts LightGBM to
    )
    return model, _probability_output(model)


def _probability_output(model: Any) -> str:
    names = [o.name for o in model.graph.output]
    for n in names:
        if "prob" in n:
            return str(n)
    return str(names[-1])


def stamp(
    model: Any, fleet: Fleet, labels: tuple[str, ...], output_kind: str = "probabilities"
) -> bytes:
    """The model's bytes with the spec binding in its metadata_props."""
    from onnx import helper

    del model.metadata_props[:]
    helper.set_model_props(model, metadata_props(fleet, labels, output_kind))
    data: bytes = model.SerializeToString()
    return data
