package main

// confluent-kafka-go v1.9 has no Go API to describe a consumer group; librdkafka 1.9 does
// (rd_kafka_list_groups with a group name sends DescribeGroups to the group's coordinator).
// This calls it on a handle of our own. The header is the one the module vendors next to the
// static library (the setup script puts its folder in CGO_CFLAGS); the symbols come from the
// same librdkafka_glibc_linux.a the kafka package links.

/*
#include <stdlib.h>
#include <string.h>
#include <rdkafka.h>

static rd_kafka_t *describer_new(const char *bootstrap, char *errstr, size_t errlen) {
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, errstr, errlen) != RD_KAFKA_CONF_OK ||
	    rd_kafka_conf_set(conf, "client.id", "sluice-compat-librdkafka-describe", errstr, errlen) != RD_KAFKA_CONF_OK) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	return rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, errlen);
}

static const struct rd_kafka_group_info *group_at(const struct rd_kafka_group_list *l, int i) {
	return &l->groups[i];
}

static const struct rd_kafka_group_member_info *member_at(const struct rd_kafka_group_info *g, int i) {
	return &g->members[i];
}
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

type describedMember struct {
	MemberID   string
	Assignment map[string][]int32
}

type describedGroup struct {
	State        string
	ProtocolType string
	Protocol     string
	Members      []describedMember
}

type describer struct{ rk *C.rd_kafka_t }

func newDescriber(bootstrap string) (*describer, error) {
	cs := C.CString(bootstrap)
	defer C.free(unsafe.Pointer(cs))
	errstr := (*C.char)(C.malloc(512))
	defer C.free(unsafe.Pointer(errstr))
	rk := C.describer_new(cs, errstr, 512)
	if rk == nil {
		return nil, fmt.Errorf("rd_kafka_new: %s", C.GoString(errstr))
	}
	return &describer{rk: rk}, nil
}

func (d *describer) close() { C.rd_kafka_destroy(d.rk) }

// describe returns the group as the coordinator's DescribeGroups answer has it.
func (d *describer) describe(group string, timeoutMs int) (describedGroup, error) {
	cg := C.CString(group)
	defer C.free(unsafe.Pointer(cg))
	var list *C.struct_rd_kafka_group_list
	if err := C.rd_kafka_list_groups(d.rk, cg, &list, C.int(timeoutMs)); err != C.RD_KAFKA_RESP_ERR_NO_ERROR {
		return describedGroup{}, fmt.Errorf("rd_kafka_list_groups: %s", C.GoString(C.rd_kafka_err2str(err)))
	}
	defer C.rd_kafka_group_list_destroy(list)
	if list.group_cnt != 1 {
		return describedGroup{}, fmt.Errorf("rd_kafka_list_groups returned %d groups", int(list.group_cnt))
	}
	g := C.group_at(list, 0)
	if g.err != C.RD_KAFKA_RESP_ERR_NO_ERROR {
		return describedGroup{}, fmt.Errorf("group error: %s", C.GoString(C.rd_kafka_err2str(g.err)))
	}
	out := describedGroup{State: C.GoString(g.state), ProtocolType: C.GoString(g.protocol_type), Protocol: C.GoString(g.protocol)}
	for i := 0; i < int(g.member_cnt); i++ {
		m := C.member_at(g, C.int(i))
		raw := C.GoBytes(m.member_assignment, m.member_assignment_size)
		as, err := decodeAssignment(raw)
		if err != nil {
			return out, fmt.Errorf("member %s: %w", C.GoString(m.member_id), err)
		}
		out.Members = append(out.Members, describedMember{MemberID: C.GoString(m.member_id), Assignment: as})
	}
	return out, nil
}

// decodeAssignment reads the consumer protocol's assignment (KIP-62 layout: version int16,
// [topic string16, [partition int32]], user data bytes).
func decodeAssignment(b []byte) (map[string][]int32, error) {
	out := map[string][]int32{}
	if len(b) == 0 {
		return out, nil
	}
	pos := 0
	need := func(n int) error {
		if pos+n > len(b) {
			return fmt.Errorf("assignment truncated at byte %d of %d", pos, len(b))
		}
		return nil
	}
	i16 := func() (int, error) {
		if err := need(2); err != nil {
			return 0, err
		}
		v := int(int16(binary.BigEndian.Uint16(b[pos:])))
		pos += 2
		return v, nil
	}
	i32 := func() (int32, error) {
		if err := need(4); err != nil {
			return 0, err
		}
		v := int32(binary.BigEndian.Uint32(b[pos:]))
		pos += 4
		return v, nil
	}
	if _, err := i16(); err != nil { // version
		return nil, err
	}
	n, err := i32()
	if err != nil {
		return nil, err
	}
	for t := int32(0); t < n; t++ {
		l, err := i16()
		if err != nil {
			return nil, err
		}
		if err := need(l); err != nil {
			return nil, err
		}
		name := string(b[pos : pos+l])
		pos += l
		np, err := i32()
		if err != nil {
			return nil, err
		}
		for p := int32(0); p < np; p++ {
			v, err := i32()
			if err != nil {
				return nil, err
			}
			out[name] = append(out[name], v)
		}
	}
	return out, nil
}
