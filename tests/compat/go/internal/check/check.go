// Package check holds what the Go client programs of the compatibility matrix share: the
// `CHECK <name> ok|FAIL <reason>` output (tests/compat/harness.py), unique names, deadlines,
// and the record values every client writes and expects back.
package check

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"
)

// Flags every program takes.
type Flags struct {
	Bootstrap string
	Prefix    string
}

// Parse reads -bootstrap (default $SLUICE_BOOTSTRAP) and returns the flags plus a unique
// prefix for this run's topics, groups and transactional ids.
func Parse(client string) Flags {
	f := Flags{}
	flag.StringVar(&f.Bootstrap, "bootstrap", os.Getenv("SLUICE_BOOTSTRAP"), "broker host:port")
	flag.Parse()
	if f.Bootstrap == "" {
		fmt.Fprintln(os.Stderr, "-bootstrap (or SLUICE_BOOTSTRAP) is required")
		os.Exit(2)
	}
	if !strings.HasPrefix(f.Bootstrap, "127.0.0.1:") {
		fmt.Fprintln(os.Stderr, "only 127.0.0.1 may be targeted")
		os.Exit(2)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	f.Prefix = fmt.Sprintf("compat-go-%s-%s", client, hex.EncodeToString(b))
	return f
}

// Run runs one check with its own deadline and prints its line. A panic is a failure, not a
// crash of the whole program (the later checks still run). Returns whether it passed.
func Run(name string, timeout time.Duration, fn func(ctx context.Context) error) (passed bool) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	started := time.Now()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		done <- fn(ctx)
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout + 10*time.Second):
		// The check ignored its context; report it and move on (its goroutine leaks).
		err = fmt.Errorf("did not return within %s", timeout+10*time.Second)
	}
	if err != nil {
		Fail(name, err)
		return false
	}
	fmt.Printf("CHECK %s ok\n", name)
	fmt.Fprintf(os.Stderr, "# %s passed in %s\n", name, time.Since(started).Round(time.Millisecond))
	return true
}

// Fail prints a failed check (the reason on one line).
func Fail(name string, err error) {
	reason := strings.ReplaceAll(err.Error(), "\n", " | ")
	fmt.Printf("CHECK %s FAIL %s\n", name, reason)
}

// Skip reports a check that cannot run because one it depends on failed.
func Skip(name, because string) {
	fmt.Printf("CHECK %s FAIL not run: %s failed\n", name, because)
}

// Info prints a line for people (the harness ignores it).
func Info(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "# "+format+"\n", args...)
}

// Values of the records every program writes, in order, to partition 0 of the main topic.
const (
	PlainCount = 10
	IdemCount  = 10
	// GroupFirst records are read and committed by the group's first consumer.
	GroupFirst = 7
)

func PlainValue(i int) string { return fmt.Sprintf("plain-%d", i) }
func IdemValue(i int) string  { return fmt.Sprintf("idem-%d", i) }
func LateValue(i int) string  { return fmt.Sprintf("late-%d", i) }

// Expected returns the values of offsets 0.. after the produce checks.
func Expected() []string {
	var out []string
	for i := 0; i < PlainCount; i++ {
		out = append(out, PlainValue(i))
	}
	for i := 0; i < IdemCount; i++ {
		out = append(out, IdemValue(i))
	}
	return out
}

// Record is what the checks compare: an offset and a value.
type Record struct {
	Offset int64
	Value  string
}

// ExpectSequence checks that got are exactly want, read from offset `from`, in order.
func ExpectSequence(got []Record, want []string, from int64) error {
	if len(got) != len(want) {
		return fmt.Errorf("read %d records, want %d: %s", len(got), len(want), Describe(got))
	}
	for i, r := range got {
		if r.Offset != from+int64(i) || r.Value != want[i] {
			return fmt.Errorf("record %d is (offset %d, %q), want (offset %d, %q); all: %s",
				i, r.Offset, r.Value, from+int64(i), want[i], Describe(got))
		}
	}
	return nil
}

// Describe shortens a record list for a failure message.
func Describe(rs []Record) string {
	parts := make([]string, 0, len(rs))
	for i, r := range rs {
		if i == 30 {
			parts = append(parts, fmt.Sprintf("... (%d more)", len(rs)-30))
			break
		}
		parts = append(parts, fmt.Sprintf("%d:%s", r.Offset, r.Value))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Poll calls fn until it returns true or ctx ends; fn's last error is in the failure.
func Poll(ctx context.Context, what string, every time.Duration, fn func() (bool, error)) error {
	var last error
	for {
		ok, err := fn()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("timed out waiting for %s (last: %v)", what, last)
			}
			return fmt.Errorf("timed out waiting for %s", what)
		case <-time.After(every):
		}
	}
}

// PollFunc returns the records a consumer has for us now (possibly none), waiting briefly.
type PollFunc func(ctx context.Context) ([]Record, error)

// ReadUntil polls until done(all records so far) holds or ctx ends.
func ReadUntil(ctx context.Context, poll PollFunc, done func([]Record) bool) ([]Record, error) {
	var got []Record
	for !done(got) {
		if ctx.Err() != nil {
			return got, fmt.Errorf("timed out after reading %d records: %s", len(got), Describe(got))
		}
		rs, err := poll(ctx)
		if err != nil {
			return got, fmt.Errorf("after %d records: %w", len(got), err)
		}
		got = append(got, rs...)
	}
	return got, nil
}

// ReadN reads until at least n records have arrived.
func ReadN(ctx context.Context, poll PollFunc, n int) ([]Record, error) {
	return ReadUntil(ctx, poll, func(rs []Record) bool { return len(rs) >= n })
}

// ReadThrough reads until a record at offset `last` (or later) has arrived.
func ReadThrough(ctx context.Context, poll PollFunc, last int64) ([]Record, error) {
	return ReadUntil(ctx, poll, func(rs []Record) bool { return len(rs) > 0 && rs[len(rs)-1].Offset >= last })
}

// ReadValue reads until a record with value v has arrived.
func ReadValue(ctx context.Context, poll PollFunc, v string) ([]Record, error) {
	return ReadUntil(ctx, poll, func(rs []Record) bool { return len(rs) > 0 && rs[len(rs)-1].Value == v })
}

// Values lists the records' values.
func Values(rs []Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Value
	}
	return out
}

// SameValues compares value lists.
func SameValues(got, want []string) error {
	if strings.Join(got, ",") != strings.Join(want, ",") {
		return fmt.Errorf("values %v, want %v", got, want)
	}
	return nil
}

// FromEnd drives the consume-from-end check for a consumer already told to start at the end
// of partition 0 (its offset lookup may still be in flight: that is why this does not write
// one record and wait for it). It writes late-0, late-1, ... one at a time until the consumer
// returns something; then everything the consumer returned must be late records at
// consecutive offsets, starting with one of them and ending with the last one written. It
// returns how many late records were written (they stay in the partition).
func FromEnd(ctx context.Context, produce func(ctx context.Context, value string) error, poll PollFunc, firstLateOffset int64) (int, error) {
	// One poll before writing anything: it gives the consumer time to look up the end, and
	// whatever it returns now was written before it was positioned.
	early, err := poll(ctx)
	if err != nil {
		return 0, err
	}
	if len(early) > 0 {
		return 0, fmt.Errorf("before any late record was written the consumer returned %s", Describe(early))
	}
	written := 0
	var got []Record
	for len(got) == 0 {
		if ctx.Err() != nil {
			return written, fmt.Errorf("wrote %d late records; the consumer returned none", written)
		}
		if written >= 60 {
			return written, fmt.Errorf("wrote %d late records; the consumer returned none", written)
		}
		if err := produce(ctx, LateValue(written)); err != nil {
			return written, fmt.Errorf("producing %s: %w", LateValue(written), err)
		}
		written++
		rs, err := poll(ctx)
		if err != nil {
			return written, err
		}
		got = append(got, rs...)
	}
	// Everything written so far must arrive, and nothing else.
	rest, err := ReadUntil(ctx, poll, func(rs []Record) bool {
		all := append(append([]Record{}, got...), rs...)
		return all[len(all)-1].Value == LateValue(written-1) || len(all) > written+40
	})
	got = append(got, rest...)
	if err != nil {
		return written, err
	}
	first := got[0]
	var k int
	if _, err := fmt.Sscanf(first.Value, "late-%d", &k); err != nil {
		return written, fmt.Errorf("the first record seen is (offset %d, %q), produced before the consumer was positioned at the end", first.Offset, first.Value)
	}
	var want []string
	for i := k; i < written; i++ {
		want = append(want, LateValue(i))
	}
	if err := ExpectSequence(got, want, first.Offset); err != nil {
		return written, err
	}
	if first.Offset != firstLateOffset+int64(k) {
		return written, fmt.Errorf("%s is at offset %d, want %d", first.Value, first.Offset, firstLateOffset+int64(k))
	}
	Info("consume_from_end: wrote %d late records, the consumer saw late-%d..late-%d", written, k, written-1)
	return written, nil
}

// ExpectRange checks that got are exactly offsets from..end-1 of the main topic's partition
// 0, in order, with the values the produce checks wrote (and late-N values after them).
func ExpectRange(got []Record, from, end int64) error {
	want := Expected()
	if int64(len(got)) != end-from {
		return fmt.Errorf("read %d records, want offsets %d..%d: %s", len(got), from, end-1, Describe(got))
	}
	for i, r := range got {
		off := from + int64(i)
		ok := r.Offset == off
		if off < int64(len(want)) {
			ok = ok && r.Value == want[off]
		} else {
			ok = ok && strings.HasPrefix(r.Value, "late-")
		}
		if !ok {
			return fmt.Errorf("record %d is (offset %d, %q), want offset %d; all: %s", i, r.Offset, r.Value, off, Describe(got))
		}
	}
	return nil
}

// The transactions checks' records: a committed transaction, an aborted one, then a
// committed one with a single record that tells readers they have seen everything.
var (
	TxnCommitted = []string{"txn-commit-0", "txn-commit-1", "txn-commit-2"}
	TxnAborted   = []string{"txn-abort-0", "txn-abort-1", "txn-abort-2"}
)

const TxnFinal = "txn-final"

// TxnReadCommitted is what a read_committed consumer must see.
func TxnReadCommitted() []string {
	return append(append([]string{}, TxnCommitted...), TxnFinal)
}

// TxnReadUncommitted is what a read_uncommitted consumer must see (aborted records too).
func TxnReadUncommitted() []string {
	return append(append(append([]string{}, TxnCommitted...), TxnAborted...), TxnFinal)
}
