package engines

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// parse reads a whole exposition, every line kept.
func parse(r io.Reader) (map[string]*dto.MetricFamily, error) {
	f := newLineFilter(r, Limits{})
	defer f.release()
	return parseLines(f.next, 0, false)
}

// parseExpfmt is how bodies were parsed before textparse.go: expfmt's text
// decoder, then a check for series given twice. It is the reference our
// parser is held to, and the baseline of BenchmarkParse. expfmt panics on
// some input; that is an error here.
func parseExpfmt(r io.Reader) (_ map[string]*dto.MetricFamily, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("expfmt panicked: %v", v)
		}
	}()
	dec := expfmt.NewDecoder(r, expfmt.FmtText)
	families := map[string]*dto.MetricFamily{}
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			return families, nil
		}
		if err != nil {
			return nil, err
		}
		if _, dup := families[mf.GetName()]; dup {
			return nil, fmt.Errorf("family %q twice", mf.GetName())
		}
		seen := map[string]bool{}
		for _, m := range mf.GetMetric() {
			key := seriesName(mf.GetName(), m)
			bounds := map[float64]bool{}
			for _, b := range m.GetHistogram().GetBucket() {
				if bounds[b.GetUpperBound()] {
					return nil, fmt.Errorf("bucket le=%g twice in %s", b.GetUpperBound(), key)
				}
				bounds[b.GetUpperBound()] = true
			}
			if seen[key] {
				return nil, fmt.Errorf("series %s twice", key)
			}
			seen[key] = true
		}
		families[mf.GetName()] = mf
	}
}

// parseCases state what our parser makes of the text format's corners: the
// families (prototext, by name), or an error (want nil). accepted marks the
// errors where expfmt accepted the body: what we refuse on purpose (the list
// at the top of textparse.go).
var parseCases = []struct {
	name     string
	input    string
	want     map[string]string
	accepted bool // by expfmt, where want is nil
}{
	{name: "empty", input: "", want: map[string]string{}},
	{name: "blank lines, blanks without newline at the end", input: "\n \t\n  ", want: map[string]string{}},
	{name: "comments", input: "# a comment\n#\n# EOF\n# UNIT a seconds\n# HELP\n#HELPx y\n", want: map[string]string{}},
	{name: "sample without TYPE is untyped", input: "a 1\n", want: map[string]string{
		"a": `name:"a" type:UNTYPED metric:{untyped:{value:1}}`,
	}},
	{
		name:  "HELP escapes and trailing blanks; OpenMetrics _total is a family of its own",
		input: "# HELP a one\\\\two\\nthree \"q\" \n#TYPE a counter\na_total 1\na 2\n",
		want: map[string]string{
			"a":       `name:"a" help:"one\\two\nthree \"q\" " type:COUNTER metric:{counter:{value:2}}`,
			"a_total": `name:"a_total" type:UNTYPED metric:{untyped:{value:1}}`,
		},
	},
	{name: "HELP with another escape", input: "# HELP a x\\t\na 1\n"},
	{name: "HELP and TYPE without samples: no family", input: "# HELP a x\n# TYPE a gauge\n", want: map[string]string{}},
	{name: "empty HELP is none, a second one is allowed", input: "# HELP a \n# HELP a y\na 1\n", want: map[string]string{
		"a": `name:"a" help:"y" type:UNTYPED metric:{untyped:{value:1}}`,
	}},
	{name: "second HELP", input: "# HELP a x\n# HELP a y\na 1\n"},
	{name: "TYPE after a sample", input: "a 1\n# TYPE a gauge\n"},
	{name: "second TYPE", input: "# TYPE a gauge\n# TYPE a counter\n"},
	{name: "blank after the type", input: "# TYPE a gauge \na 1\n"},
	{name: "type in capitals", input: "# TYPE a GAUGE\na 1\n", accepted: true},
	{name: "gaugehistogram", input: "# TYPE g gaugehistogram\ng_bucket{le=\"+Inf\"} 2\n", accepted: true},
	{name: "OpenMetrics unknown type", input: "# TYPE a unknown\na 1\n"},
	{
		name:  "label blanks, trailing comma, escapes",
		input: "# TYPE a gauge\na { x = \"q\\\"b\\\\s\\nn\" , y=\"\",} NaN\n",
		want: map[string]string{
			"a": `name:"a" type:GAUGE metric:{label:{name:"x" value:"q\"b\\s\nn"} label:{name:"y" value:""} gauge:{value:nan}}`,
		},
	},
	{name: "empty braces", input: "a{} 1\n", want: map[string]string{"a": `name:"a" type:UNTYPED metric:{untyped:{value:1}}`}},
	{name: "label value with another escape", input: "a{x=\"\\t\"} 1\n"},
	{name: "label value not closed", input: "a{x=\"1} 1\n"},
	{name: "label name given twice", input: "a{x=\"1\",x=\"2\"} 1\n"},
	{name: "__name__ label", input: "a{__name__=\"b\"} 1\n"},
	{name: "label value not UTF-8", input: "a{x=\"\xff\"} 1\n"},
	{name: "label name not a name", input: "a{1x=\"1\"} 1\n"},
	{
		name:  "values and timestamps",
		input: "a{x=\"1\"} +Inf 123\na{x=\"2\"} -inf -5\na{x=\"3\"} 1e3\t7\n  a{x=\"4\"}   .5\n",
		want: map[string]string{"a": `name:"a" type:UNTYPED
			metric:{label:{name:"x" value:"1"} untyped:{value:inf} timestamp_ms:123}
			metric:{label:{name:"x" value:"2"} untyped:{value:-inf} timestamp_ms:-5}
			metric:{label:{name:"x" value:"3"} untyped:{value:1000} timestamp_ms:7}
			metric:{label:{name:"x" value:"4"} untyped:{value:0.5}}`},
	},
	{name: "blank after the value", input: "a 1 \n"},
	{name: "blank after the timestamp", input: "a 1 2 \n"},
	{name: "timestamp in seconds", input: "a 1 1.5\n"},
	{name: "digit separator", input: "a 1_000\n"},
	{name: "hexadecimal float", input: "a 0x1p4\n"},
	{name: "no value", input: "a\n"},
	{name: "no final newline", input: "a 1"},
	{name: "carriage return", input: "a 1\r\n"},
	{name: "name starting with a digit", input: "1a 1\n"},
	{
		name: "histogram lines fold by their labels, in any order",
		input: "# TYPE h histogram\nh_bucket{le=\"1\",x=\"a\"} 1\nh_bucket{x=\"b\",le=\"1\"} 2\n" +
			"h_bucket{x=\"a\",le=\"+Inf\"} 3\nh_count{x=\"a\"} 3\nh_sum{x=\"a\"} 0.5\n",
		want: map[string]string{"h": `name:"h" type:HISTOGRAM
			metric:{label:{name:"x" value:"a"} histogram:{sample_count:3 sample_sum:0.5
				bucket:{cumulative_count:1 upper_bound:1} bucket:{cumulative_count:3 upper_bound:inf}}}
			metric:{label:{name:"x" value:"b"} histogram:{bucket:{cumulative_count:2 upper_bound:1}}}`},
	},
	{name: "timestamp on a histogram line", input: "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1 100\nh_count 1 200\n", accepted: true},
	{name: "timestamp on a summary line", input: "# TYPE s summary\ns{quantile=\"0.5\"} 1 5\ns_sum 2 6\n", accepted: true},
	{name: "bucket count not whole", input: "# TYPE h histogram\nh_bucket{le=\"1\"} 1.5\n", accepted: true},
	{name: "bucket count negative", input: "# TYPE h histogram\nh_bucket{le=\"1\"} -1\n"},
	{name: "le not a number", input: "# TYPE h histogram\nh_bucket{le=\"x\"} 1\n"},
	{name: "bucket given twice", input: "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"1.0\"} 1\n"},
	{name: "bucket without le", input: "# TYPE h histogram\nh_bucket 1\n", accepted: true},
	{name: "histogram's own name", input: "# TYPE h histogram\nh 1\n", accepted: true},
	{name: "le on a _count line", input: "# TYPE h histogram\nh_count{le=\"1\"} 1\n", accepted: true},
	{name: "_sum given twice", input: "# TYPE h histogram\nh_sum 1\nh_sum 2\n", accepted: true},
	{
		name:  "_bucket of a family not typed histogram is a family of its own",
		input: "# TYPE h gauge\nh_bucket{le=\"1\"} 1\n",
		want:  map[string]string{"h_bucket": `name:"h_bucket" type:UNTYPED metric:{label:{name:"le" value:"1"} untyped:{value:1}}`},
	},
	{
		name:  "summary",
		input: "# TYPE s summary\ns{quantile=\"0.5\",x=\"a\"} 1\ns{x=\"a\",quantile=\"0.9\"} 2\ns_sum{x=\"a\"} 2\ns_count{x=\"a\"} 3\n",
		want: map[string]string{"s": `name:"s" type:SUMMARY
			metric:{label:{name:"x" value:"a"} summary:{sample_count:3 sample_sum:2 quantile:{quantile:0.5 value:1} quantile:{quantile:0.9 value:2}}}`},
	},
	{name: "quantile given twice", input: "# TYPE s summary\ns{quantile=\"0.5\"} 1\ns{quantile=\"0.9\"} 2\ns{quantile=\".5\"} 3\n", accepted: true},
	{name: "summary sample without quantile", input: "# TYPE s summary\ns{x=\"b\"} 4\n", accepted: true},
	{name: "summary count not whole", input: "# TYPE s summary\ns_count 3.9\n", accepted: true},
	{
		name:  "a family interleaved with another stays one family",
		input: "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nb 1\nh_bucket{le=\"+Inf\"} 1\n",
		want: map[string]string{
			"h": `name:"h" type:HISTOGRAM metric:{histogram:{bucket:{cumulative_count:1 upper_bound:1} bucket:{cumulative_count:1 upper_bound:inf}}}`,
			"b": `name:"b" type:UNTYPED metric:{untyped:{value:1}}`,
		},
	},
	{name: "a series twice", input: "a 1\na 2\n"},
	{name: "a series twice, labels in another order", input: "a{x=\"1\",y=\"2\"} 1\na{y=\"2\",x=\"1\"} 1\n"},
	{name: "metric name in the braces", input: "{a} 1\n", accepted: true},
	{name: "quoted metric name", input: "\"a\" 1\n", accepted: true},
	{name: "quoted label name", input: "a{\"x\"=\"1\"} 1\n", accepted: true},
	// expfmt's parser panicked on this.
	{name: "summary named in the braces first", input: "# TYPE s summary\n# TYPE g gauge\n{s,a=\"b\"} 1\n"},
	{name: "65 labels", input: "a{" + manyLabels(65) + "} 1\n", accepted: true},
	{
		name:  "64 labels",
		input: "a{" + manyLabels(64) + "} 1\n",
		want:  map[string]string{"a": `name:"a" type:UNTYPED metric:{` + manyLabelsText(64) + ` untyped:{value:1}}`},
	},
	{name: "a label given twice past the 16th", input: "a{" + manyLabels(20) + `,l3="x"} 1` + "\n"},
}

// manyLabels gives l0="0",…,l<n-1>="<n-1>"; manyLabelsText the same labels
// in prototext.
func manyLabels(n int) string {
	var labels []string
	for i := range n {
		labels = append(labels, fmt.Sprintf(`l%d="%d"`, i, i))
	}
	return strings.Join(labels, ",")
}

func manyLabelsText(n int) string {
	var labels []string
	for i := range n {
		labels = append(labels, fmt.Sprintf(`label:{name:"l%d" value:"%d"}`, i, i))
	}
	return strings.Join(labels, " ")
}

func TestParseCases(t *testing.T) {
	for _, tt := range parseCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parse(strings.NewReader(tt.input))
			_, expfmtErr := parseExpfmt(strings.NewReader(tt.input))
			if tt.want == nil {
				if err == nil {
					t.Fatalf("no error, families %v", got)
				}
				if (expfmtErr == nil) != tt.accepted {
					t.Errorf("expfmt's error %v; the case says expfmt accepted it: %v", expfmtErr, tt.accepted)
				}
				t.Logf("error (as wanted): %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]*dto.MetricFamily{}
			for name, text := range tt.want {
				mf := &dto.MetricFamily{}
				if err := prototext.Unmarshal([]byte(text), mf); err != nil {
					t.Fatalf("want %s: %v", name, err)
				}
				want[name] = mf
			}
			if err := sameFamilies(got, want); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestParseMatchesExpfmtOnSamples: every real engine exposition parses to
// exactly the families expfmt made of it.
func TestParseMatchesExpfmtOnSamples(t *testing.T) {
	for name, body := range engineBodies(t) {
		want, err := parseExpfmt(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: expfmt: %v", name, err)
		}
		got, err := parse(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := sameFamilies(got, want); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// engineBodies are the real expositions of fixtures/engines, with the final
// newline some captures lack.
func engineBodies(tb testing.TB) map[string][]byte {
	tb.Helper()
	out := map[string][]byte{}
	for _, fx := range fixtures {
		out[fx.file] = readFixture(tb, fx.file)
	}
	return out
}

func sameFamilies(got, want map[string]*dto.MetricFamily) error {
	gotNames, wantNames := slices.Sorted(mapsKeys(got)), slices.Sorted(mapsKeys(want))
	if !slices.Equal(gotNames, wantNames) {
		return fmt.Errorf("families %v, want %v", gotNames, wantNames)
	}
	for name, w := range want {
		if !proto.Equal(got[name], w) {
			return fmt.Errorf("family %s:\n got %v\nwant %v", name, got[name], w)
		}
	}
	return nil
}

func mapsKeys(m map[string]*dto.MetricFamily) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// FuzzParseMatchesExpfmt: whatever our parser accepts, expfmt accepted too
// and made the same families of. Where only expfmt accepts, we refuse on
// purpose (TestParseCases lists those rules).
func FuzzParseMatchesExpfmt(f *testing.F) {
	for _, body := range engineBodies(f) {
		f.Add(body)
		for i, family := range bytes.Split(body, []byte("\n# HELP ")) {
			if i > 0 {
				family = append([]byte("# HELP "), family...)
			}
			f.Add(append(family, '\n'))
		}
	}
	for _, tt := range parseCases {
		f.Add([]byte(tt.input))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		want, expfmtErr := parseExpfmt(bytes.NewReader(data))
		if expfmtErr != nil {
			t.Fatalf("accepted what expfmt refused (%v): %v", expfmtErr, got)
		}
		if err := sameFamilies(got, want); err != nil {
			t.Fatal(err)
		}
	})
}

// TestParseLongLine: a line longer than the read buffer is read whole.
func TestParseLongLine(t *testing.T) {
	value := strings.Repeat(`ab\"`, 30000) // 120,000 bytes, 90,000 unescaped
	got, err := parse(strings.NewReader("# TYPE a gauge\na{x=\"" + value + "\"} 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v := got["a"].GetMetric()[0].GetLabel()[0].GetValue(); v != strings.Repeat(`ab"`, 30000) {
		t.Errorf("value of %d bytes, want 90000", len(v))
	}
}

// TestParseReaderError: the body's own error comes back (Scrape's callers
// look for ErrTooLarge), also when it cuts a line short.
func TestParseReaderError(t *testing.T) {
	for _, body := range []string{"a 1\n", "a 1\nb{x=\"1"} {
		r := io.MultiReader(strings.NewReader(body), iotest.ErrReader(ErrTooLarge))
		if _, err := parse(r); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%q then ErrTooLarge: error %v", body, err)
		}
	}
}

// BenchmarkParse parses every real engine sample with expfmt's decoder, as
// before textparse.go, and with ours.
func BenchmarkParse(b *testing.B) {
	var bodies [][]byte
	var size int64
	for _, body := range engineBodies(b) {
		bodies = append(bodies, body)
		size += int64(len(body))
	}
	for _, bench := range []struct {
		name  string
		parse func(io.Reader) (map[string]*dto.MetricFamily, error)
	}{{"expfmt", parseExpfmt}, {"own", parse}} {
		b.Run(bench.name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				for _, body := range bodies {
					if _, err := bench.parse(bytes.NewReader(body)); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
