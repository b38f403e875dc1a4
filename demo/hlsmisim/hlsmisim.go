// Package hlsmisim is a stand-in for Intel Gaudi's hl-smi, for tests and
// the demo (demo/hlsmi is it as a command; the demo runs the exporter binary
// itself as its hl-smi). It answers the one form the exporter uses,
//
//	hl-smi --query-aip=<fields> --format=csv[,noheader][,nounits]
//
// (also -Q <fields> and -f <format>), from a table: a CSV file with hl-smi's
// header ("memory.used [MiB]") and unit-less values, as recorded in
// fixtures/gaudi/. It prints the requested columns in the requested order,
// with or without the header, and appends each column's unit to its values
// unless nounits is given, as hl-smi does ("672 MiB"); "N/A" stays as it is.
// A requested field the table lacks fails the run like an invalid query.
//
// Main is steered by the environment:
//
//	HLSMI_FAKE_TABLE  the table file (required in the default mode)
//	HLSMI_FAKE_MODE   "" answer from the table; "raw" print the table file
//	                  verbatim; "hang" never answer; "hang-group" start a
//	                  child in the same process group, then never answer;
//	                  "exit" print HLSMI_FAKE_STDERR to stderr and exit with
//	                  HLSMI_FAKE_EXIT (default 1); "flood" print without end;
//	                  "flood-ignore-epipe" the same, with SIGPIPE ignored
//	                  and write errors too; "nonutf8" print bytes that are
//	                  not UTF-8; "child-holds-stdout" answer from the
//	                  table, then start a child in the same process group
//	                  that inherits stdout and never exits, and exit 0;
//	                  "child-holds-stdout-setsid" the same with the child
//	                  in a session of its own
//	HLSMI_FAKE_LOG    append "start <pid>" (or "child <pid>") to this file
//	                  when starting, so that tests can count runs
//	HLSMI_FAKE_DELAY  a duration to wait before answering, as a busy
//	                  driver makes hl-smi take
package hlsmisim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Main runs the stand-in with args (without the program name) and returns
// its exit status.
func Main(args []string) int {
	if err := run(args); err != nil {
		fmt.Fprintln(os.Stderr, "hl-smi:", err)
		return 1
	}
	return 0
}

func run(args []string) error {
	mode := os.Getenv("HLSMI_FAKE_MODE")
	role := "start"
	if os.Getenv("HLSMI_FAKE_CHILD") != "" {
		role = "child"
	}
	if os.Getenv("HLSMI_FAKE_CHILD_LOGGED") == "" {
		if err := logStart(role, os.Getpid()); err != nil {
			return err
		}
	}

	if d := os.Getenv("HLSMI_FAKE_DELAY"); d != "" {
		delay, err := time.ParseDuration(d)
		if err != nil {
			return fmt.Errorf("HLSMI_FAKE_DELAY: %w", err)
		}
		time.Sleep(delay)
	}
	switch mode {
	case "hang":
		hang()
	case "hang-group":
		// The child is this program again, which must call Main when
		// HLSMI_FAKE_MODE is set (demo/hlsmi does).
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), "HLSMI_FAKE_MODE=hang", "HLSMI_FAKE_CHILD=1")
		if err := child.Start(); err != nil {
			return err
		}
		hang()
	case "exit":
		fmt.Fprintln(os.Stderr, os.Getenv("HLSMI_FAKE_STDERR"))
		code := 1
		if _, err := fmt.Sscan(os.Getenv("HLSMI_FAKE_EXIT"), &code); err != nil {
			code = 1
		}
		os.Exit(code)
	case "flood":
		line := []byte(strings.Repeat("0, HL-225, ", 100) + "\n")
		for {
			if _, err := os.Stdout.Write(line); err != nil {
				return err
			}
		}
	case "flood-ignore-epipe":
		signal.Ignore(syscall.SIGPIPE)
		line := []byte(strings.Repeat("0, HL-225, ", 100) + "\n")
		for {
			_, _ = os.Stdout.Write(line)
		}
	case "child-holds-stdout", "child-holds-stdout-setsid":
		f, err := os.Open(os.Getenv("HLSMI_FAKE_TABLE"))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := Answer(f, args, os.Stdout); err != nil {
			return err
		}
		child := exec.Command(os.Args[0])
		// Logged here, before this exits: the child may be killed with
		// its group before it could log itself.
		child.Env = append(os.Environ(), "HLSMI_FAKE_MODE=hang", "HLSMI_FAKE_CHILD=1", "HLSMI_FAKE_CHILD_LOGGED=1")
		child.Stdout = os.Stdout
		if mode == "child-holds-stdout-setsid" {
			child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		}
		if err := child.Start(); err != nil {
			return err
		}
		return logStart("child", child.Process.Pid)
	case "nonutf8":
		_, err := os.Stdout.Write([]byte("index, name\n0, HL-\xff\xfe225\n"))
		return err
	case "raw":
		b, err := os.ReadFile(os.Getenv("HLSMI_FAKE_TABLE"))
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(b)
		return err
	case "":
	default:
		return fmt.Errorf("unknown HLSMI_FAKE_MODE %q", mode)
	}

	f, err := os.Open(os.Getenv("HLSMI_FAKE_TABLE"))
	if err != nil {
		return err
	}
	defer f.Close()
	return Answer(f, args, os.Stdout)
}

// logStart appends "<role> <pid>" to HLSMI_FAKE_LOG, if set.
func logStart(role string, pid int) error {
	path := os.Getenv("HLSMI_FAKE_LOG")
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "%s %d\n", role, pid)
	return f.Close()
}

// Started reads the PIDs logStart wrote to log under role ("start" or
// "child"), for tests that count and kill the runs; none if log does not
// exist yet.
func Started(log, role string) ([]int, error) {
	b, err := os.ReadFile(log)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for line := range strings.Lines(string(b)) {
		r, pid, _ := strings.Cut(strings.TrimSpace(line), " ")
		if r != role {
			continue
		}
		n, err := strconv.Atoi(pid)
		if err != nil {
			return nil, fmt.Errorf("%s: line %q", log, line)
		}
		pids = append(pids, n)
	}
	return pids, nil
}

func hang() {
	for {
		time.Sleep(time.Hour)
	}
}

func parseArgs(args []string) (query []string, format map[string]bool, err error) {
	format = map[string]bool{}
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		if !hasValue && (name == "-Q" || name == "-f" || name == "--query-aip" || name == "--format") {
			if i+1 == len(args) {
				return nil, nil, fmt.Errorf("option %s needs a value", name)
			}
			i++
			value = args[i]
		}
		switch name {
		case "-Q", "--query-aip":
			query = strings.Split(value, ",")
		case "-f", "--format":
			for _, f := range strings.Split(value, ",") {
				format[strings.TrimSpace(f)] = true
			}
		default:
			return nil, nil, fmt.Errorf("unsupported option %q", args[i])
		}
	}
	if len(query) == 0 || !format["csv"] {
		return nil, nil, errors.New("only --query-aip=<fields> --format=csv[,noheader][,nounits] is supported")
	}
	return query, format, nil
}

// Answer answers the hl-smi command line args from table, a CSV table with
// hl-smi's header, writing what hl-smi would print to w.
func Answer(table io.Reader, args []string, w io.Writer) error {
	query, format, err := parseArgs(args)
	if err != nil {
		return err
	}
	r := csv.NewReader(table)
	r.TrimLeadingSpace = true
	rows, err := r.ReadAll()
	if err != nil {
		return fmt.Errorf("table: %w", err)
	}
	if len(rows) == 0 {
		return errors.New("table has no header")
	}
	column := map[string]int{}
	unit := map[string]string{}
	for i, cell := range rows[0] {
		name, u := cell, ""
		if j := strings.LastIndexByte(cell, '['); j > 0 && strings.HasSuffix(cell, "]") {
			name, u = strings.TrimSpace(cell[:j]), cell[j+1:len(cell)-1]
		}
		column[name], unit[name] = i, u
	}
	var cols []int
	for _, q := range query {
		i, ok := column[q]
		if !ok {
			return fmt.Errorf("invalid query type %q", q)
		}
		cols = append(cols, i)
	}
	var b strings.Builder
	if !format["noheader"] {
		for k, i := range cols {
			if k > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strings.TrimSpace(rows[0][i]))
		}
		b.WriteString("\n")
	}
	for _, row := range rows[1:] {
		for k, i := range cols {
			if k > 0 {
				b.WriteString(", ")
			}
			v := strings.TrimSpace(row[i])
			b.WriteString(v)
			if u := unit[query[k]]; u != "" && v != "N/A" && !format["nounits"] {
				b.WriteString(" " + u)
			}
		}
		b.WriteString("\n")
	}
	_, err = io.WriteString(w, b.String())
	return err
}
