package gaudi

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxDevices bounds the rows accepted from one run. A Gaudi node holds 8
// devices; thousands of rows mean the output is not what was asked for.
const maxDevices = 1024

var utf8BOM = []byte("\ufeff")

// notAvailable is what hl-smi prints for a reading the device or driver
// does not give (the and the manual's "N/A").
const notAvailable = "N/A"

// Parse reads the output of hl-smi --query-aip=<fields> --format=csv[,noheader],nounits.
// fields is the list that was asked for, in order; header says whether the
// output begins with hl-smi's header line.
//
// With a header, columns are matched by the names in it, so a reordered
// output is read correctly, and a column that was not asked for, one that is
// missing or a unit other than the documented one is refused. Without a
// header only the count of columns can be checked: a row wider or narrower
// than the field list is refused, a reordering cannot be seen. That is why
// the Runner asks for the header unless told otherwise.
func Parse(out []byte, fields []string, header bool) ([]Device, error) {
	if !utf8.Valid(out) {
		return nil, &Error{Reason: ReasonNonUTF8, Detail: excerpt(out)}
	}
	// A byte order mark is no part of the header's first name, which
	// would read as a column not asked for ("\ufeffindex").
	out = bytes.TrimPrefix(out, utf8BOM)
	if err := checkLineEnd(out); err != nil {
		return nil, err
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(bytes.NewReader(out))
	defer func() {
		br.Reset(nil)
		readers.Put(br)
	}()
	r := csv.NewReader(br)
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	// Each record is used before the next is read; the cells' strings
	// stay valid (csv.Reader.ReuseRecord).
	r.ReuseRecord = true
	// csv.Reader skips empty lines but reads a line of spaces as a row of
	// one empty cell, which would refuse the table as a row too short: it
	// holds no cell either, and is skipped as well.
	read := func() ([]string, error) {
		for {
			rec, err := r.Read()
			if err != nil || len(rec) > 1 || strings.TrimSpace(rec[0]) != "" {
				return rec, err
			}
		}
	}

	columns := fields
	if header {
		rec, err := read()
		if errors.Is(err, io.EOF) {
			return nil, &Error{Reason: ReasonMalformed, Detail: "no header line"}
		}
		if err != nil {
			return nil, &Error{Reason: ReasonMalformed, Detail: "header", Err: err}
		}
		if columns, err = headerColumns(rec, fields); err != nil {
			return nil, err
		}
	} else if err := checkFieldList(fields); err != nil {
		return nil, err
	}

	// A row a line: room for every row, up to the bound.
	devices := make([]Device, 0, min(bytes.Count(out, []byte{'\n'})+1, maxDevices))
	for line := 1; ; line++ {
		rec, err := read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &Error{Reason: ReasonMalformed, Err: err}
		}
		if len(devices) == maxDevices {
			return nil, &Error{Reason: ReasonMalformed, Detail: fmt.Sprintf("more than %d rows", maxDevices)}
		}
		switch {
		case len(rec) > len(columns):
			return nil, &Error{Reason: ReasonExtraColumn, Detail: fmt.Sprintf("row %d has %d columns, want %d", line, len(rec), len(columns))}
		case len(rec) < len(columns):
			return nil, &Error{Reason: ReasonMissingColumn, Detail: fmt.Sprintf("row %d has %d columns, want %d", line, len(rec), len(columns))}
		}
		devices = append(devices, Device{Index: line - 1})
		d := &devices[len(devices)-1]
		parseRow(d, rec, columns)
		// Among the rows before, at most maxDevices: for a node's few,
		// cheaper than a set.
		for i := range len(devices) - 1 {
			if d.Index != NoIndex && devices[i].Index == d.Index {
				return nil, &Error{Reason: ReasonMalformed, Field: "index", Detail: fmt.Sprintf("index %d listed twice", d.Index)}
			}
		}
	}
	return devices, nil
}

// checkLineEnd refuses output whose last line has no line end. hl-smi
// ends every line with one, so such output was cut short, and the cut may
// fall inside the last cell: "16" read as "1" is a plausible number, where
// a cut between cells at least shows as a column missing. The whole output
// is refused rather than its last row left out: its device would read as
// no longer listed, falsely down, and a cause that lasts (a wrapper that
// strips the last line end) would keep it so while the collector looked
// healthy. A tail of white space only holds no cell to misread.
func checkLineEnd(out []byte) error {
	tail := out[bytes.LastIndexByte(out, '\n')+1:]
	if len(bytes.TrimSpace(tail)) == 0 {
		return nil
	}
	return &Error{Reason: ReasonMalformed, Detail: "output cut short, its last line has no line end: " + excerpt(tail)}
}

// readers are the buffered readers Parse reads through, which csv.NewReader
// would otherwise allocate at every run (4 KiB).
var readers = sync.Pool{New: func() any { return bufio.NewReader(nil) }}

// checkFieldList refuses a field list that names a field twice: its
// columns could not be told apart. The list is short (the fields this
// reader knows, at most), so a search of the fields before each costs less
// than a set would.
func checkFieldList(fields []string) error {
	for i, f := range fields {
		if slices.Contains(fields[:i], f) {
			return &Error{Reason: ReasonMalformed, Field: f, Detail: "asked for twice"}
		}
	}
	return nil
}

// headerColumns maps the header's cells ("memory.used [MiB]") to field
// names and checks them against the fields asked for. Each cell is looked
// up in fields, and each accepted one in the columns before it: a cell not
// asked for or taken already ends the header, so at most len(fields)+1
// cells are looked at (but to tell a first line naming no field).
func headerColumns(rec []string, fields []string) ([]string, error) {
	if err := checkFieldList(fields); err != nil {
		return nil, err
	}
	asked := func(name string) bool { return slices.Contains(fields, name) }
	// A first line naming none of the fields is no header at all (a
	// message such as "No devices found", a table without its header):
	// not the table asked for, rather than a column too many.
	if !slices.ContainsFunc(rec, func(cell string) bool { name, _ := splitHeader(cell); return asked(name) }) {
		return nil, &Error{Reason: ReasonMalformed, Detail: "first line is no header: " + excerpt([]byte(strings.Join(rec, ", ")))}
	}
	columns := make([]string, 0, len(fields))
	for _, cell := range rec {
		name, unit := splitHeader(cell)
		if !asked(name) {
			return nil, &Error{Reason: ReasonExtraColumn, Field: strconv.Quote(excerpt([]byte(name))), Detail: "not asked for"}
		}
		if slices.Contains(columns, name) {
			return nil, &Error{Reason: ReasonMalformed, Field: name, Detail: "column listed twice"}
		}
		if spec, ok := fieldSpecs[name]; ok && unit != "" && unit != spec.unit {
			return nil, &Error{Reason: ReasonUnit, Field: name, Detail: fmt.Sprintf("unit %q, want %q", excerpt([]byte(unit)), spec.unit)}
		}
		columns = append(columns, name)
	}
	for _, f := range fields {
		if !slices.Contains(columns, f) {
			return nil, &Error{Reason: ReasonMissingColumn, Field: f}
		}
	}
	return columns, nil
}

// splitHeader splits "memory.used [MiB]" into its name and unit.
func splitHeader(cell string) (name, unit string) {
	cell = strings.TrimSpace(cell)
	if i := strings.LastIndexByte(cell, '['); i > 0 && strings.HasSuffix(cell, "]") {
		return strings.TrimSpace(cell[:i]), cell[i+1 : len(cell)-1]
	}
	return cell, ""
}

// parseRow reads one device into d, numbered by its row. Output without an
// index column (recorded by others, or asked for without it) is numbered in
// row order: every recorded output with the column lists it in that order
// (fixtures/gaudi/real), and there is no other identity to go by.
func parseRow(d *Device, rec []string, columns []string) {
	for i, name := range columns {
		spec, known := fieldSpecs[name]
		if !known {
			continue
		}
		v := strings.TrimSpace(rec[i])
		if name == "index" {
			// N/A included: hl-smi numbers every device it lists, so a row
			// without a number is one odd cell, and the other rows stand.
			if !spec.set(d, v) {
				d.Index = NoIndex
				d.Problems = append(d.Problems, &Error{Reason: ReasonBadValue, Field: name, Detail: excerpt([]byte(rec[i]))})
			}
			continue
		}
		if v == notAvailable {
			continue
		}
		// Without nounits hl-smi prints "672 MiB"; accept the documented
		// unit after a value so that either format reads the same.
		if spec.unit != "" {
			v = strings.TrimSpace(strings.TrimSuffix(v, spec.unit))
		}
		if !spec.set(d, v) {
			d.Problems = append(d.Problems, &Error{Reason: ReasonBadValue, Field: name, Detail: excerpt([]byte(rec[i]))})
		}
	}
	// More memory used than the device has is no reading: the used cell is
	// the unreadable one, as the total is the device's size, which its
	// model fixes.
	if used, total := d.MemoryUsed, d.MemoryTotal; used.OK && total.OK && used.Value > total.Value {
		d.MemoryUsed = Opt[uint64]{}
		d.Problems = append(d.Problems, &Error{Reason: ReasonBadValue, Field: "memory.used",
			Detail: fmt.Sprintf("%d bytes, above memory.total's %d", used.Value, total.Value)})
	}
}
