// The segmentio/kafka-go row of the client compatibility matrix: runs the checks kafka-go can
// express against the broker at -bootstrap and prints `CHECK <name> ok|FAIL <reason>` lines.
// kafka-go has no idempotent producer and no transactions, so produce_idempotent and
// transactions are not run (nor listed for it).
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime/debug"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"

	"sluice/compat/goclients/internal/check"
)

var (
	flags  check.Flags
	client *kafka.Client
	topic  string
	group  string
)

// partitionZero sends every record to partition 0.
type partitionZero struct{}

func (partitionZero) Balance(kafka.Message, ...int) int { return 0 }

func writer() *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(flags.Bootstrap),
		Topic:        topic,
		Balancer:     partitionZero{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 10 * time.Millisecond,
		BatchSize:    100,
		ErrorLogger:  log.New(os.Stderr, "[kafka-go writer] ", log.Ltime),
	}
}

func reader(cfg kafka.ReaderConfig) *kafka.Reader {
	cfg.Brokers = []string{flags.Bootstrap}
	cfg.MaxWait = 500 * time.Millisecond
	cfg.ErrorLogger = log.New(os.Stderr, "[kafka-go reader] ", log.Ltime)
	return kafka.NewReader(cfg)
}

// poll reads what the reader has: waits up to a second for the first message, then takes
// whatever follows within 100 ms of each other. fetch only reads (FetchMessage: no commits).
func poll(r *kafka.Reader) check.PollFunc {
	return func(ctx context.Context) ([]check.Record, error) {
		var out []check.Record
		wait := time.Second
		for len(out) < 500 {
			mctx, cancel := context.WithTimeout(ctx, wait)
			m, err := r.FetchMessage(mctx)
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
					return out, nil
				}
				return out, err
			}
			out = append(out, check.Record{Offset: m.Offset, Value: string(m.Value)})
			wait = 100 * time.Millisecond
		}
		return out, nil
	}
}

func write(ctx context.Context, w *kafka.Writer, values ...string) error {
	var ms []kafka.Message
	for _, v := range values {
		ms = append(ms, kafka.Message{Value: []byte(v)})
	}
	return w.WriteMessages(ctx, ms...)
}

func endOffset(ctx context.Context) (int64, error) {
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0)}},
	})
	if err != nil {
		return 0, err
	}
	ps := resp.Topics[topic]
	if len(ps) != 1 {
		return 0, fmt.Errorf("list offsets: %+v", resp.Topics)
	}
	return ps[0].LastOffset, ps[0].Error
}

func describeGroup(ctx context.Context) (kafka.DescribeGroupsResponseGroup, error) {
	resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return kafka.DescribeGroupsResponseGroup{}, err
	}
	if len(resp.Groups) != 1 {
		return kafka.DescribeGroupsResponseGroup{}, fmt.Errorf("described %d groups", len(resp.Groups))
	}
	return resp.Groups[0], resp.Groups[0].Error
}

func main() {
	flags = check.Parse("kafka-go")
	topic, group = flags.Prefix+"-t", flags.Prefix+"-g"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/segmentio/kafka-go" {
				check.Info("%s %s", d.Path, d.Version)
			}
		}
	}
	client = &kafka.Client{Addr: kafka.TCP(flags.Bootstrap), Timeout: 10 * time.Second}

	check.Run("admin_create_topic", 30*time.Second, func(ctx context.Context) error {
		req := &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 3, ReplicationFactor: 1}}}
		resp, err := client.CreateTopics(ctx, req)
		if err != nil {
			return err
		}
		if err := resp.Errors[topic]; err != nil {
			return err
		}
		again, err := client.CreateTopics(ctx, req)
		if err != nil {
			return err
		}
		if err := again.Errors[topic]; !errors.Is(err, kafka.TopicAlreadyExists) {
			return fmt.Errorf("creating %s a second time answered %v, want TOPIC_ALREADY_EXISTS", topic, err)
		}
		return nil
	})

	check.Run("admin_describe_topic", 30*time.Second, func(ctx context.Context) error {
		return check.Poll(ctx, "3 partitions with a leader", 200*time.Millisecond, func() (bool, error) {
			md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
			if err != nil {
				return false, err
			}
			if len(md.Topics) != 1 || md.Topics[0].Name != topic {
				return false, fmt.Errorf("metadata topics %+v", md.Topics)
			}
			t := md.Topics[0]
			if t.Error != nil {
				return false, t.Error
			}
			if len(t.Partitions) != 3 {
				return false, fmt.Errorf("%d partitions, want 3", len(t.Partitions))
			}
			ids := map[int]bool{}
			for _, b := range md.Brokers {
				ids[b.ID] = true
			}
			seen := map[int]bool{}
			for _, p := range t.Partitions {
				if p.Error != nil || !ids[p.Leader.ID] || p.Leader.Host == "" || len(p.Replicas) != 1 || len(p.Isr) != 1 {
					return false, fmt.Errorf("partition %d: %+v", p.ID, p)
				}
				seen[p.ID] = true
			}
			return seen[0] && seen[1] && seen[2], fmt.Errorf("partition ids %v", seen)
		})
	})

	w := writer()
	defer w.Close()
	check.Run("produce", 30*time.Second, func(ctx context.Context) error {
		var values []string
		for i := 0; i < check.PlainCount; i++ {
			values = append(values, check.PlainValue(i))
		}
		if err := write(ctx, w, values...); err != nil {
			return err
		}
		// kafka-go's Writer does not return offsets: the end offset must have moved by 10.
		end, err := endOffset(ctx)
		if err != nil {
			return err
		}
		if end != check.PlainCount {
			return fmt.Errorf("end offset %d after %d records, want %d", end, check.PlainCount, check.PlainCount)
		}
		return nil
	})

	// Idempotent produce writes the idem-N records the other clients write idempotently, here
	// with a plain writer (kafka-go has no idempotent producer), so the consume checks read
	// the same sequence as everywhere else. It is not a check.
	if err := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var values []string
		for i := 0; i < check.IdemCount; i++ {
			values = append(values, check.IdemValue(i))
		}
		return write(ctx, w, values...)
	}(); err != nil {
		check.Info("writing the second ten records failed: %v", err)
	}

	check.Run("consume_from_beginning", 30*time.Second, func(ctx context.Context) error {
		r := reader(kafka.ReaderConfig{Topic: topic, Partition: 0})
		defer r.Close()
		if err := r.SetOffset(kafka.FirstOffset); err != nil {
			return err
		}
		want := check.Expected()
		got, err := check.ReadN(ctx, poll(r), len(want))
		if err != nil {
			return err
		}
		return check.ExpectSequence(got, want, 0)
	})

	check.Run("consume_from_end", 45*time.Second, func(ctx context.Context) error {
		r := reader(kafka.ReaderConfig{Topic: topic, Partition: 0})
		defer r.Close()
		if err := r.SetOffset(kafka.LastOffset); err != nil {
			return err
		}
		_, err := check.FromEnd(ctx, func(ctx context.Context, v string) error {
			return write(ctx, w, v)
		}, poll(r), int64(len(check.Expected())))
		return err
	})

	groupReader := func() *kafka.Reader {
		return reader(kafka.ReaderConfig{
			GroupID: group, Topic: topic, StartOffset: kafka.FirstOffset,
			CommitInterval:   0, // CommitMessages commits synchronously
			JoinGroupBackoff: 500 * time.Millisecond,
		})
	}
	var memberB *kafka.Reader
	check.Run("group_commit_and_resume", 60*time.Second, func(ctx context.Context) error {
		end, err := endOffset(ctx)
		if err != nil {
			return err
		}
		a := groupReader()
		// Read one by one so A takes exactly the first GroupFirst records.
		var got []check.Record
		var last kafka.Message
		for len(got) < check.GroupFirst {
			m, err := a.FetchMessage(ctx)
			if err != nil {
				a.Close()
				return fmt.Errorf("member A after %d records: %w", len(got), err)
			}
			got = append(got, check.Record{Offset: m.Offset, Value: string(m.Value)})
			last = m
		}
		if err := check.ExpectRange(got, 0, check.GroupFirst); err != nil {
			a.Close()
			return fmt.Errorf("member A: %w", err)
		}
		if err := a.CommitMessages(ctx, last); err != nil {
			a.Close()
			return fmt.Errorf("member A commit: %w", err)
		}
		if err := a.Close(); err != nil { // leaves the group
			return fmt.Errorf("member A close: %w", err)
		}
		b := groupReader()
		got, err = check.ReadThrough(ctx, poll(b), end-1)
		if err == nil {
			err = check.ExpectRange(got, check.GroupFirst, end)
		}
		if err != nil {
			b.Close()
			return fmt.Errorf("member B: %w", err)
		}
		memberB = b
		return nil
	})

	check.Run("admin_describe_group", 30*time.Second, func(ctx context.Context) error {
		if memberB == nil {
			return fmt.Errorf("no member to describe (group_commit_and_resume failed)")
		}
		err := check.Poll(ctx, "group Stable with 1 member assigned the topic", 200*time.Millisecond, func() (bool, error) {
			g, err := describeGroup(ctx)
			if err != nil {
				return false, err
			}
			if g.GroupState != "Stable" || len(g.Members) != 1 {
				return false, fmt.Errorf("state %q, %d members", g.GroupState, len(g.Members))
			}
			var ps []int
			for _, t := range g.Members[0].MemberAssignments.Topics {
				if t.Topic == topic {
					ps = append(ps, t.Partitions...)
				}
			}
			sort.Ints(ps)
			return fmt.Sprint(ps) == "[0 1 2]", fmt.Errorf("member assigned %+v", g.Members[0].MemberAssignments.Topics)
		})
		if err != nil {
			return err
		}
		offsets, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {0}}})
		if err != nil {
			return err
		}
		if err := offsets.Error; err != nil {
			return err
		}
		ps := offsets.Topics[topic]
		if len(ps) != 1 || ps[0].Error != nil || ps[0].CommittedOffset != check.GroupFirst {
			return fmt.Errorf("committed offset of %s/0 is %+v, want %d", topic, ps, check.GroupFirst)
		}
		if err := memberB.Close(); err != nil {
			return fmt.Errorf("closing the member: %w", err)
		}
		memberB = nil
		return check.Poll(ctx, "group Empty after its member left", 200*time.Millisecond, func() (bool, error) {
			g, err := describeGroup(ctx)
			if err != nil {
				return false, err
			}
			return g.GroupState == "Empty" && len(g.Members) == 0, fmt.Errorf("state %q, %d members", g.GroupState, len(g.Members))
		})
	})
	if memberB != nil {
		memberB.Close()
	}

	check.Run("admin_delete_topic", 30*time.Second, func(ctx context.Context) error {
		resp, err := client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{topic}})
		if err != nil {
			return err
		}
		if err := resp.Errors[topic]; err != nil {
			return err
		}
		return check.Poll(ctx, "the topic to leave the metadata", 200*time.Millisecond, func() (bool, error) {
			md, err := client.Metadata(ctx, &kafka.MetadataRequest{}) // all topics: never auto-creates
			if err != nil {
				return false, err
			}
			for _, t := range md.Topics {
				if t.Name == topic {
					return false, fmt.Errorf("%s still listed", topic)
				}
			}
			return true, nil
		})
	})
}
