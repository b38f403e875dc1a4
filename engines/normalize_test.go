package engines

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		name         string
		engine       Engine
		defaultModel string
		input        string
		want         string
		wantErr      string
	}{
		{
			name:   "vLLM transition release: the new name wins per series, the old one still fills gaps",
			engine: VLLM,
			input: `# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="a"} 0.1
vllm:gpu_cache_usage_perc{model_name="b"} 0.2
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="a"} 0.5
`,
			want: `# TYPE xpu_inference_kv_cache_usage_ratio gauge
xpu_inference_kv_cache_usage_ratio{model="a"} 0.5
xpu_inference_kv_cache_usage_ratio{model="b"} 0.2
`,
		},
		{
			// Found by probing: the per-token series could not be read (its
			// count is one ahead of its +Inf bucket, as a racing collection
			// can give), and the per-request series of the older name was
			// served in its place, its count 50 where the per-token one
			// read 5000: a plausible, wrong histogram. Model b has only the
			// old name, which fills its gap as before.
			name:   "SGLang: a preferred series that cannot be read is left out, not replaced by the older name's",
			engine: SGLang,
			input: `# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{le="0.1",model_name="a"} 4000
sglang:inter_token_latency_seconds_bucket{le="+Inf",model_name="a"} 5000
sglang:inter_token_latency_seconds_sum{model_name="a"} 250
sglang:inter_token_latency_seconds_count{model_name="a"} 5001
# TYPE sglang:time_per_output_token_seconds histogram
sglang:time_per_output_token_seconds_bucket{le="0.1",model_name="a"} 40
sglang:time_per_output_token_seconds_bucket{le="+Inf",model_name="a"} 50
sglang:time_per_output_token_seconds_sum{model_name="a"} 2.5
sglang:time_per_output_token_seconds_count{model_name="a"} 50
sglang:time_per_output_token_seconds_bucket{le="0.1",model_name="b"} 1
sglang:time_per_output_token_seconds_bucket{le="+Inf",model_name="b"} 2
sglang:time_per_output_token_seconds_sum{model_name="b"} 0.3
sglang:time_per_output_token_seconds_count{model_name="b"} 2
`,
			want: `# TYPE xpu_inference_inter_token_latency_seconds histogram
xpu_inference_inter_token_latency_seconds_bucket{le="0.1",model="b"} 1
xpu_inference_inter_token_latency_seconds_bucket{le="+Inf",model="b"} 2
xpu_inference_inter_token_latency_seconds_sum{model="b"} 0.3
xpu_inference_inter_token_latency_seconds_count{model="b"} 2
`,
			wantErr: "sglang:inter_token_latency_seconds",
		},
		{
			// Found by probing: left out with no word.
			name:   "histogram lines without their TYPE line are told, not read",
			engine: VLLM,
			input: `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1
vllm:e2e_request_latency_seconds_bucket{le="1",model_name="m"} 2
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 3
vllm:e2e_request_latency_seconds_sum{model_name="m"} 4
vllm:e2e_request_latency_seconds_count{model_name="m"} 3
`,
			want: `# TYPE xpu_inference_requests_running gauge
xpu_inference_requests_running{model="m"} 1
`,
			wantErr: `without a "# TYPE vllm:e2e_request_latency_seconds histogram" line`,
		},
		{
			name:   "vLLM V1 engine cores collapse: counts add up, the KV cache keeps the fullest, _created is ignored",
			engine: VLLM,
			input: `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 4
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 1
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 3
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 3
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 0.25
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 3
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="m"} 1.7e+09
`,
			want: `# TYPE xpu_inference_kv_cache_usage_ratio gauge
xpu_inference_kv_cache_usage_ratio{model="m"} 0.75
# TYPE xpu_inference_requests_running gauge
xpu_inference_requests_running{model="m"} 7
# TYPE xpu_inference_time_to_first_token_seconds histogram
xpu_inference_time_to_first_token_seconds_bucket{le="0.1",model="m"} 4
xpu_inference_time_to_first_token_seconds_bucket{le="+Inf",model="m"} 5
xpu_inference_time_to_first_token_seconds_sum{model="m"} 0.75
xpu_inference_time_to_first_token_seconds_count{model="m"} 5
`,
		},
		{
			name:   "vLLM finish reasons become outcomes",
			engine: VLLM,
			input: `# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop",model_name="m"} 10
vllm:request_success_total{finished_reason="length",model_name="m"} 5
vllm:request_success_total{finished_reason="abort",model_name="m"} 2
vllm:request_success_total{finished_reason="error",model_name="m"} 1
vllm:request_success_total{finished_reason="repetition",model_name="m"} 1
`,
			want: `# TYPE xpu_inference_requests_total counter
xpu_inference_requests_total{model="m",outcome="aborted"} 2
xpu_inference_requests_total{model="m",outcome="error"} 1
xpu_inference_requests_total{model="m",outcome="success"} 16
`,
		},
		{
			name:   "histograms with different buckets cannot be added up",
			engine: VLLM,
			input: `# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1",model_name="m"} 1
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 1
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 0.5
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 1
vllm:e2e_request_latency_seconds_bucket{engine="1",le="2",model_name="m"} 1
vllm:e2e_request_latency_seconds_bucket{engine="1",le="+Inf",model_name="m"} 1
vllm:e2e_request_latency_seconds_sum{engine="1",model_name="m"} 1.5
vllm:e2e_request_latency_seconds_count{engine="1",model_name="m"} 1
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 1
`,
			want: `# TYPE xpu_inference_requests_waiting gauge
xpu_inference_requests_waiting{model="m"} 1
`,
			wantErr: "different buckets",
		},
		{
			// Found by probing: without +Inf and count, the highest bucket
			// was taken as +Inf, which says no request took over 1 s while
			// the sum of 250 s over them says otherwise; without _sum, the
			// mean read 0.
			name:   "a missing +Inf bucket comes from the count; without either, or without _sum, the series is left out",
			engine: SGLang,
			input: `# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.5",model_name="m"} 2
sglang:time_to_first_token_seconds_sum{model_name="m"} 3
sglang:time_to_first_token_seconds_count{model_name="m"} 4
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{le="1",model_name="m"} 3
sglang:e2e_request_latency_seconds_sum{model_name="m"} 250
# TYPE sglang:queue_time_seconds histogram
sglang:queue_time_seconds_bucket{le="1",model_name="m"} 3
sglang:queue_time_seconds_bucket{le="+Inf",model_name="m"} 3
sglang:queue_time_seconds_count{model_name="m"} 3
`,
			wantErr: "neither a +Inf bucket nor a count",
			want: `# TYPE xpu_inference_time_to_first_token_seconds histogram
xpu_inference_time_to_first_token_seconds_bucket{le="0.5",model="m"} 2
xpu_inference_time_to_first_token_seconds_bucket{le="+Inf",model="m"} 4
xpu_inference_time_to_first_token_seconds_sum{model="m"} 3
xpu_inference_time_to_first_token_seconds_count{model="m"} 4
`,
		},
		{
			name:   "inconsistent histograms are skipped, the rest is kept",
			engine: SGLang,
			input: `# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.5",model_name="m"} 2
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 3
sglang:time_to_first_token_seconds_count{model_name="m"} 4
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{le="1",model_name="m"} 5
sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 4
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",tp_rank="0"} 2
`,
			want: `# TYPE xpu_inference_requests_running gauge
xpu_inference_requests_running{model="m"} 2
`,
			wantErr: "fewer observations",
		},
		{
			// Each pipeline stage receives every request from the one
			// before (SGLang scheduler.py, recv_requests) and, being its
			// stage's attn_tp_rank 0, writes the gauges: two copies of
			// one batch of 4, not 8 requests.
			name:   "SGLang pipeline stages are copies of one scheduler's state",
			engine: SGLang,
			input: `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",pp_rank="0",tp_rank="0"} 4
sglang:num_running_reqs{model_name="m",pp_rank="1",tp_rank="0"} 4
`,
			want: `# TYPE xpu_inference_requests_running gauge
xpu_inference_requests_running{model="m"} 4
`,
		},
		{
			name:   "NaN and infinite readings pass through",
			engine: SGLang,
			input: `# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} NaN
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} +Inf
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 1
sglang:time_to_first_token_seconds_sum{model_name="m"} -Inf
sglang:time_to_first_token_seconds_count{model_name="m"} 1
`,
			want: `# TYPE xpu_inference_kv_cache_usage_ratio gauge
xpu_inference_kv_cache_usage_ratio{model="m"} NaN
# TYPE xpu_inference_requests_waiting gauge
xpu_inference_requests_waiting{model="m"} +Inf
# TYPE xpu_inference_time_to_first_token_seconds histogram
xpu_inference_time_to_first_token_seconds_bucket{le="+Inf",model="m"} 1
xpu_inference_time_to_first_token_seconds_sum{model="m"} -Inf
xpu_inference_time_to_first_token_seconds_count{model="m"} 1
`,
		},
		{
			name:         "the engine's model label wins over the default model",
			engine:       NIM,
			defaultModel: "configured",
			input: `# TYPE num_requests_running gauge
num_requests_running{model_name="reported"} 1
num_requests_running{model_name=""} 2
`,
			want: `# TYPE xpu_inference_requests_running gauge
xpu_inference_requests_running{model="configured"} 2
xpu_inference_requests_running{model="reported"} 1
`,
		},
		{
			name:   "a gauge where a histogram belongs is reported",
			engine: NIM,
			input: `# TYPE time_to_first_token_seconds gauge
time_to_first_token_seconds{model_name="m"} 1
`,
			wantErr: "not a histogram",
		},
		{
			name:   "TGI failures by err label",
			engine: TGI,
			input: `# TYPE tgi_request_success counter
tgi_request_success 7
# TYPE tgi_request_failure counter
tgi_request_failure{err="validation"} 1
tgi_request_failure{err="overloaded"} 2
tgi_request_failure{err="dropped"} 3
tgi_request_failure{err="cancelled"} 4
tgi_request_failure{err="generation"} 5
tgi_request_failure{err="incomplete_generation"} 6
`,
			want: `# TYPE xpu_inference_requests_total counter
xpu_inference_requests_total{model="",outcome="aborted"} 7
xpu_inference_requests_total{model="",outcome="error"} 11
xpu_inference_requests_total{model="",outcome="rejected"} 3
xpu_inference_requests_total{model="",outcome="success"} 7
`,
		},
		{
			name:   "Triton failure reasons, and failures of releases without a reason",
			engine: Triton,
			input: `# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="a",reason="REJECTED",version="1"} 1
nv_inference_request_failure{model="a",reason="CANCELED",version="1"} 2
nv_inference_request_failure{model="a",reason="BACKEND",version="1"} 3
nv_inference_request_failure{model="a",reason="OTHER",version="1"} 4
nv_inference_request_failure{model="b",version="2"} 5
`,
			want: `# TYPE xpu_inference_requests_total counter
xpu_inference_requests_total{model="a",model_version="1",outcome="aborted"} 2
xpu_inference_requests_total{model="a",model_version="1",outcome="error"} 7
xpu_inference_requests_total{model="a",model_version="1",outcome="rejected"} 1
xpu_inference_requests_total{model="b",model_version="2",outcome="error"} 5
`,
		},
		{
			name:   "Triton microsecond counters become +Inf-only histograms in seconds",
			engine: Triton,
			input: `# TYPE nv_inference_request_success counter
nv_inference_request_success{model="a",version="1"} 4
nv_inference_request_success{model="b",version="1"} 0
# TYPE nv_inference_request_duration_us counter
nv_inference_request_duration_us{model="a",version="1"} 2500000
nv_inference_request_duration_us{model="b",version="1"} 0
nv_inference_request_duration_us{model="c",version="1"} 10
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="a",version="1"} 125
`,
			want: `# TYPE xpu_inference_queue_time_seconds histogram
xpu_inference_queue_time_seconds_bucket{le="+Inf",model="a",model_version="1"} 4
xpu_inference_queue_time_seconds_sum{model="a",model_version="1"} 0.000125
xpu_inference_queue_time_seconds_count{model="a",model_version="1"} 4
# TYPE xpu_inference_request_duration_seconds histogram
xpu_inference_request_duration_seconds_bucket{le="+Inf",model="a",model_version="1"} 4
xpu_inference_request_duration_seconds_sum{model="a",model_version="1"} 2.5
xpu_inference_request_duration_seconds_count{model="a",model_version="1"} 4
xpu_inference_request_duration_seconds_bucket{le="+Inf",model="b",model_version="1"} 0
xpu_inference_request_duration_seconds_sum{model="b",model_version="1"} 0
xpu_inference_request_duration_seconds_count{model="b",model_version="1"} 0
# TYPE xpu_inference_requests_total counter
xpu_inference_requests_total{model="a",model_version="1",outcome="success"} 4
xpu_inference_requests_total{model="b",model_version="1",outcome="success"} 0
`,
		},
		{
			name:   "Triton first-response histogram in milliseconds",
			engine: Triton,
			input: `# TYPE nv_inference_first_response_histogram_ms histogram
nv_inference_first_response_histogram_ms_bucket{le="100",model="m",version="1"} 8
nv_inference_first_response_histogram_ms_bucket{le="500",model="m",version="1"} 30
nv_inference_first_response_histogram_ms_bucket{le="+Inf",model="m",version="1"} 37
nv_inference_first_response_histogram_ms_sum{model="m",version="1"} 10771
nv_inference_first_response_histogram_ms_count{model="m",version="1"} 37
`,
			want: `# TYPE xpu_inference_time_to_first_token_seconds histogram
xpu_inference_time_to_first_token_seconds_bucket{le="0.1",model="m",model_version="1"} 8
xpu_inference_time_to_first_token_seconds_bucket{le="0.5",model="m",model_version="1"} 30
xpu_inference_time_to_first_token_seconds_bucket{le="+Inf",model="m",model_version="1"} 37
xpu_inference_time_to_first_token_seconds_sum{model="m",model_version="1"} 10.771
xpu_inference_time_to_first_token_seconds_count{model="m",model_version="1"} 37
`,
		},
		{
			name:   "TensorRT-LLM: used/max without a fraction, backend queue over Triton's",
			engine: Triton,
			input: `# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="trt",version="1"} 100
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="trt",version="1"} 400
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="empty",version="1"} 0
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="empty",version="1"} 0
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="trt",request_type="waiting",version="1"} 5
nv_trt_llm_request_metrics{model="trt",request_type="active",version="1"} 6
nv_trt_llm_request_metrics{model="trt",request_type="max",version="1"} 512
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="trt",version="1"} 0
nv_inference_pending_request_count{model="preprocessing",version="1"} 2
`,
			want: `# TYPE xpu_inference_kv_cache_usage_ratio gauge
xpu_inference_kv_cache_usage_ratio{model="trt",model_version="1"} 0.25
# TYPE xpu_inference_requests_running gauge
xpu_inference_requests_running{model="trt",model_version="1"} 6
# TYPE xpu_inference_requests_waiting gauge
xpu_inference_requests_waiting{model="preprocessing",model_version="1"} 2
xpu_inference_requests_waiting{model="trt",model_version="1"} 5
`,
		},
		{
			// TGI counts tokens only in per-request histograms: the tokens
			// are their _sum, never their _count or a bucket (requests).
			// 8 requests read 3210 prompt tokens in all and generated 1536:
			// tokens_total prompt 3210, generation 1536, not 8 (the count)
			// or 7 (the le="1000" bucket). Cost per million tokens divides
			// by this counter's rate.
			name:         "TGI token totals are the sums of its per-request length histograms",
			engine:       TGI,
			defaultModel: "configured",
			input: `# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{le="100"} 3
tgi_request_input_length_bucket{le="1000"} 7
tgi_request_input_length_bucket{le="+Inf"} 8
tgi_request_input_length_sum 3210
tgi_request_input_length_count 8
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="100"} 5
tgi_request_generated_tokens_bucket{le="1000"} 8
tgi_request_generated_tokens_bucket{le="+Inf"} 8
tgi_request_generated_tokens_sum 1536
tgi_request_generated_tokens_count 8
`,
			want: `# TYPE xpu_inference_tokens_total counter
xpu_inference_tokens_total{model="configured",type="generation"} 1536
xpu_inference_tokens_total{model="configured",type="prompt"} 3210
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			families, err := parse(strings.NewReader(tt.input))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			samples, err := Normalize(tt.engine, families, tt.defaultModel)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error = %v, want one containing %q", err, tt.wantErr)
			}
			if got := render(samples); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestNormalizeKeepsLabelValuesVerbatim(t *testing.T) {
	const model = "a \"quoted\" \\ model\nwith ünïcode ✓"
	families, err := parse(strings.NewReader(`# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a \"quoted\" \\ model\nwith ünïcode ✓"} 1
`))
	if err != nil {
		t.Fatal(err)
	}
	samples, err := Normalize(VLLM, families, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 1 || samples[0].Labels[modelLabel] != model {
		t.Errorf("got %+v, want one sample with model %q", samples, model)
	}
}

func TestNormalizeUnknownEngine(t *testing.T) {
	if _, err := Normalize("llama.cpp", nil, ""); err == nil {
		t.Error("Normalize accepted an unknown engine")
	}
}

func TestNormalizeSurvivesNilParts(t *testing.T) {
	families := parseFixture(t, "vllm-v0-0.5-datadog-fixture.prom")
	families["vllm:num_requests_waiting"] = nil
	families["vllm:num_requests_running"].Metric = append(families["vllm:num_requests_running"].Metric, nil)
	samples, _ := Normalize(VLLM, families, "")
	names := map[string]bool{}
	for _, s := range samples {
		names[s.Name] = true
	}
	if names[requestsWaiting] || !names[tokensTotal] {
		t.Errorf("got families %v; want the fixture's families less the nil one", names)
	}
}

func TestDetect(t *testing.T) {
	for _, fx := range fixtures {
		got, err := Detect(parseFixture(t, fx.file))
		if err != nil || got != fx.engine {
			t.Errorf("Detect(%s) = %q, %v; want %q", fx.file, got, err, fx.engine)
		}
	}
	for _, file := range []string{"dcgm-exporter-t4-a10g-datadog-fixture.prom"} {
		if got, err := Detect(parseFixture(t, file)); err == nil {
			t.Errorf("Detect(%s) = %q, want an error: it is no inference engine", file, got)
		}
	}
}

func TestParseEngine(t *testing.T) {
	for _, e := range detectOrder {
		if got, err := ParseEngine(string(e)); err != nil || got != e {
			t.Errorf("ParseEngine(%q) = %q, %v", e, got, err)
		}
	}
	for name, want := range map[string]Engine{"vLLM": VLLM, "SGLang": SGLang, "TGI": TGI, "Triton": Triton, "NIM": NIM} {
		if got, err := ParseEngine(name); err != nil || got != want {
			t.Errorf("ParseEngine(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := ParseEngine("auto"); err == nil {
		t.Error(`ParseEngine("auto") succeeded; detection is the caller's choice, not an engine`)
	}
}

// TestMappingsAreConsistent guards the tables: a typo in a family name would
// otherwise yield samples without a kind or help.
func TestMappingsAreConsistent(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Families() {
		if seen[f.Name] || f.Help == "" || f.Kind == 0 {
			t.Errorf("family %+v is duplicated or incomplete", f)
		}
		seen[f.Name] = true
		if (f.Kind == Counter) != strings.HasSuffix(f.Name, "_total") {
			t.Errorf("%s: counters and only counters end in _total", f.Name)
		}
	}
	for e, s := range specs {
		for _, m := range s.mappings {
			if !seen[m.family] {
				t.Errorf("%s maps onto unknown family %q", e, m.family)
			}
			if len(m.from) == 0 {
				t.Errorf("%s: mapping onto %s has no source", e, m.family)
			}
		}
	}
}

func TestHistogramRejectsCollapsingBounds(t *testing.T) {
	families, err := parse(strings.NewReader(`# TYPE nv_inference_first_response_histogram_ms histogram
nv_inference_first_response_histogram_ms_bucket{le="5e-324",model="m"} 1
nv_inference_first_response_histogram_ms_bucket{le="1e-323",model="m"} 1
nv_inference_first_response_histogram_ms_bucket{le="+Inf",model="m"} 1
`))
	if err != nil {
		t.Fatal(err)
	}
	samples, err := Normalize(Triton, families, "")
	if err == nil || len(samples) != 0 {
		t.Errorf("got %v, %v; want no sample and an error", samples, err)
	}
}

// TestServesOnlyOnItsOwnFamilies: Triton reads the vLLM backend's vllm:
// families, but a vLLM endpoint configured as triton is not Triton's
// answer: read so, its models would all be model="" (Triton's model label
// is model). A Triton answer with the backend's families is.
func TestServesOnlyOnItsOwnFamilies(t *testing.T) {
	vllm := parseFixture(t, "vllm-0.10.0-v1-fragment-production-stack-issue617.prom")
	if Serves(Triton, vllm) || !Serves(VLLM, vllm) {
		t.Errorf("Serves on a vLLM answer: triton %v, vllm %v; want false, true", Serves(Triton, vllm), Serves(VLLM, vllm))
	}
	if backend := parseFixture(t, "constructed/triton-vllm-backend-two-models.prom"); !Serves(Triton, backend) {
		t.Error("Serves(triton) is false on Triton with its vLLM backend")
	}
}

// TestTokensFromAnUnreadableHistogramAreLeftOut: TGI counts tokens only in
// its histograms' _sum. A histogram whose count (11) is ahead of its +Inf
// bucket (10) cannot be read, nor corrected across a restart, so its sum
// is not served as prompt tokens; the readable generated-tokens histogram
// still is (sum 250).
func TestTokensFromAnUnreadableHistogramAreLeftOut(t *testing.T) {
	families, err := parse(strings.NewReader(`# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{le="100"} 4
tgi_request_input_length_bucket{le="+Inf"} 10
tgi_request_input_length_sum 900
tgi_request_input_length_count 11
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="100"} 9
tgi_request_generated_tokens_bucket{le="+Inf"} 10
tgi_request_generated_tokens_sum 250
tgi_request_generated_tokens_count 10
`))
	if err != nil {
		t.Fatal(err)
	}
	samples, err := Normalize(TGI, families, "m")
	if err == nil {
		t.Error("no error for the unreadable histogram")
	}
	var prompt, generated []float64
	for _, s := range samples {
		if s.Name != "xpu_inference_tokens_total" {
			continue
		}
		switch s.Labels["type"] {
		case "prompt":
			prompt = append(prompt, s.Value)
		case "generation":
			generated = append(generated, s.Value)
		}
	}
	if len(prompt) != 0 || len(generated) != 1 || generated[0] != 250 {
		t.Errorf("prompt tokens %v, generated %v; want none and [250]", prompt, generated)
	}
}

// TestPassedThrough: only NIM passes its backend's families through; an
// answer of vLLM's names is read by vLLM's for a nim target, for no other.
func TestPassedThrough(t *testing.T) {
	vllm := map[string]*dto.MetricFamily{"vllm:num_requests_running": {}}
	for _, tc := range []struct {
		engine Engine
		fams   map[string]*dto.MetricFamily
		want   Engine
		ok     bool
	}{
		{NIM, vllm, VLLM, true},
		{NIM, map[string]*dto.MetricFamily{}, "", false},
		{SGLang, vllm, "", false},
	} {
		if got, ok := PassedThrough(tc.engine, tc.fams); got != tc.want || ok != tc.ok {
			t.Errorf("PassedThrough(%s) = %q, %v; want %q, %v", tc.engine, got, ok, tc.want, tc.ok)
		}
	}
}

// TestNormalizeNonFiniteGaugePart: vLLM V1's two engine cores collapse into
// one series per model. Core 0 reads NaN: added up (requests running) or
// taken the largest of (the KV-cache ratio), NaN made the model's value
// NaN, hiding core 1's 3 requests and 0.5 of cache; 3 alone is not the
// model's count either. Each is left out and named; model m2, whose cores
// read 1 + 2 = 3 running and max(0.25, 0.75) = 0.75, is served (probe6-eng
// D3). A series of its own passes through as the engine gave it (m3).
func TestNormalizeNonFiniteGaugePart(t *testing.T) {
	families, err := parse(strings.NewReader(`# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} NaN
vllm:num_requests_running{engine="1",model_name="m"} 3
vllm:num_requests_running{engine="0",model_name="m2"} 1
vllm:num_requests_running{engine="1",model_name="m2"} 2
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} NaN
vllm:kv_cache_usage_perc{engine="0",model_name="m2"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m2"} 0.75
vllm:kv_cache_usage_perc{engine="0",model_name="m3"} NaN
`))
	if err != nil {
		t.Fatal(err)
	}
	samples, err := Normalize(VLLM, families, "")
	for _, want := range []string{`vllm:num_requests_running{engine="1",model_name="m"}: added up with a part that is not a finite number`, `vllm:kv_cache_usage_perc{engine="1",model_name="m"}: added up`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
	const want = `# TYPE xpu_inference_kv_cache_usage_ratio gauge
xpu_inference_kv_cache_usage_ratio{model="m2"} 0.75
xpu_inference_kv_cache_usage_ratio{model="m3"} NaN
# TYPE xpu_inference_requests_running gauge
xpu_inference_requests_running{model="m2"} 3
`
	if got := render(samples); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestNormalizeMalformedValues: a KV-cache ratio outside 0..1 and a
// negative count are left out and named, where a part of a sum is, the
// model's whole series. Found by probe D (PD6): 1.5 and -0.2 were served
// as the cache in use, and a token counter at -5.
func TestNormalizeMalformedValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		engine Engine
		body   string
		want   string // what is served
		named  []string
	}{{
		name: "ratio above 1 and below 0", engine: VLLM,
		body: `# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 1.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} -0.2
vllm:kv_cache_usage_perc{engine="0",model_name="ok"} 0
vllm:kv_cache_usage_perc{engine="1",model_name="ok"} 1
vllm:kv_cache_usage_perc{model_name="inf"} +Inf
`,
		// ok: max(0, 1) = 1, the bounds included.
		want: `# TYPE xpu_inference_kv_cache_usage_ratio gauge
xpu_inference_kv_cache_usage_ratio{model="ok"} 1
`,
		named: []string{`vllm:kv_cache_usage_perc{engine="0",model_name="m"}: 1.5 is outside 0..1`,
			`vllm:kv_cache_usage_perc{engine="1",model_name="m"}: -0.2 is outside 0..1`,
			`vllm:kv_cache_usage_perc{model_name="inf"}: +Inf is outside 0..1`},
	}, {
		// used ÷ max: 7 ÷ 5 = 1.4 is more blocks in use than there are.
		name: "TensorRT-LLM used over max", engine: Triton,
		body: `# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="a",version="1"} 7
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="a",version="1"} 5
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="b",version="1"} 1
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="b",version="1"} 4
`,
		// b: 1 ÷ 4.
		want: `# TYPE xpu_inference_kv_cache_usage_ratio gauge
xpu_inference_kv_cache_usage_ratio{model="b",model_version="1"} 0.25
`,
		named: []string{`nv_trt_llm_kv_cache_block_metrics{model="a",model_version="1"} over nv_trt_llm_kv_cache_block_metrics: 1.4 is outside 0..1`},
	}, {
		// Typed gauge, read as the counter it is: the Corrector, which
		// reads counters only, does not see it.
		name: "negative counter typed gauge", engine: VLLM,
		body: `# TYPE vllm:prompt_tokens_total gauge
vllm:prompt_tokens_total{engine="0",model_name="h"} -5
vllm:prompt_tokens_total{engine="1",model_name="h"} 20
vllm:prompt_tokens_total{model_name="ok"} 0
`,
		want: `# TYPE xpu_inference_tokens_total counter
xpu_inference_tokens_total{model="ok",type="prompt"} 0
`,
		named: []string{`vllm:prompt_tokens_total{engine="0",model_name="h"}: -5 is negative`},
	}, {
		// Triton's cumulative duration: -2,000,000 µs over 4 requests.
		name: "negative cumulative duration", engine: Triton,
		body: `# TYPE nv_inference_request_success gauge
nv_inference_request_success{model="a",version="1"} 4
# TYPE nv_inference_request_duration_us gauge
nv_inference_request_duration_us{model="a",version="1"} -2000000
`,
		want: `# TYPE xpu_inference_requests_total counter
xpu_inference_requests_total{model="a",model_version="1",outcome="success"} 4
`,
		named: []string{`nv_inference_request_duration_us{model="a",model_version="1"}: -2 is negative`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			families, err := parse(strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			samples, err := Normalize(tc.engine, families, "")
			for _, want := range tc.named {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v does not name %s", err, want)
				}
			}
			if got := render(samples); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}
