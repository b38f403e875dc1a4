package engines

import "strings"

// sglangSpec covers SGLang from the 0.4 docs example to 2026. Scheduler
// series carry rank labels, the tokenizer's never had them.
var sglangSpec = spec{
	owns:  func(name string) bool { return strings.HasPrefix(name, "sglang:") },
	model: "model_name",
	// Every rank of a model-parallel group keeps the same requests: TP
	// ranks are handed the same batch, and each pipeline stage receives
	// every request from the one before (scheduler.py, recv_requests,
	// point_to_point_pyobj from pp_rank - 1). A scheduler collector is
	// made on every rank with its tp_rank, pp_rank and moe_ep_rank, and
	// observes the queue time of every request it schedules; the gauges
	// come from attn_tp_rank 0 only, or from every rank with
	// --enable-metrics-for-all-schedulers (metrics_collector.py,
	// SchedulerMetricsCollector.init_new; req_time_stats.py,
	// set_forward_entry_time: "if self.enable_metrics:
	// self.metrics_collector.observe_queue_time"). Data-parallel groups
	// hold different requests and are told apart by dp_rank, which the
	// data-parallel controller sets under DP attention too
	// (launch_tensor_parallel_group): they are added up.
	replicas: []string{"tp_rank", "pp_rank", "moe_ep_rank"},
	mappings: []mapping{
		// With --enable-priority-scheduling the scheduler writes these
		// twice: the total under priority="" and a breakdown of the same
		// requests under priority="<n>" (metrics_collector.py,
		// SchedulerMetricsCollector._log_gauge_queue_count: "the total is
		// recorded under priority=\"\" ... Grafana queries should use
		// priority=\"\" for totals"). Releases without the label have
		// only the total.
		{family: requestsRunning, from: []source{{name: "sglang:num_running_reqs", match: label{"priority", ""}}}},
		{family: requestsWaiting, from: []source{{name: "sglang:num_queue_reqs", match: label{"priority", ""}}}},
		// token_usage is the share of the KV token pool in use.
		{family: kvCacheUsage, from: sources("sglang:token_usage")},
		{family: tokensTotal, set: label{tokenTypeLabel, tokenTypePrompt}, from: sources("sglang:prompt_tokens_total")},
		{family: tokensTotal, set: label{tokenTypeLabel, tokenTypeGeneration}, from: sources("sglang:generation_tokens_total")},
		{family: timeToFirstToken, from: sources("sglang:time_to_first_token_seconds")},
		// Before inter_token_latency_seconds existed,
		// time_per_output_token_seconds was observed every token (its
		// count tracks generation_tokens_total in the 0.4 example). Later
		// releases observe it once per request, so it is only a fallback.
		{family: interTokenLatency, from: sources("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")},
		{family: requestDuration, from: sources("sglang:e2e_request_latency_seconds")},
		{family: queueTime, from: sources("sglang:queue_time_seconds")},
		// Requests retracted from the running batch when the KV cache
		// runs out (retract_decode), counted since 0.5; the older
		// num_retracted_reqs is a gauge of those retracted now.
		{family: preemptionsTotal, from: sources("sglang:num_retracted_requests_total")},
	},
}
