// Package engines scrapes the metrics endpoints of LLM inference engines
// (vLLM, SGLang, HuggingFace TGI, NVIDIA Triton with or without its
// TensorRT-LLM backend, NVIDIA NIM for LLMs) and maps them onto one set of
// canonical xpu_inference_* families, so that one dashboard serves them all.
//
// It returns plain Go values and knows nothing of Prometheus collectors: the
// caller adds the engine label, the owner and device labels, and turns the
// samples into metrics. README.md in this directory holds the mapping table.
package engines
