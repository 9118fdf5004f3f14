"""The Prometheus metric families a model-serving service exports, by what they measure.

The names are ``prometheus_client``'s conventions for an inference server (a ``_seconds`` histogram of request
latency and one of time to first token, an ``_errors_total`` counter, gauges of queue depth, ready replicas and
allocated GPUs). Three parts agree on them: the Prometheus source reads them
(``sources.serving_metrics.DEFAULT_FAMILIES``, overridable per deployment), the simulator's exposition writes them
(``evaluation.promexport.write_serving_openmetrics``) and the OpenSLO export names them in its queries
(``metrics.slo_docs``); so they live here, below all three.
"""

SERVING_FAMILIES = {
    "latency": "inference_request_duration_seconds",
    "ttft": "inference_time_to_first_token_seconds",
    "errors": "inference_request_errors_total",
    "queue_depth": "inference_queue_depth",
    "replicas": "inference_replicas_ready",
    "gpus": "inference_gpus_allocated",
}
# the two histograms (``inference_latency_buckets.histogram``): latency and time to first token
SERVING_HISTOGRAMS = {k: SERVING_FAMILIES[k] for k in ("latency", "ttft")}
