package network

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	"smolvm.dev/smolvm/sandbox"
)

// NFLOG (nfnetlink_log) constants not in x/sys.
const (
	nfulnlMsgPacket   = 0
	nfulnlMsgConfig   = 1
	nfulaCfgCmd       = 1
	nfulaCfgMode      = 2
	nfulnlCfgCmdBind  = 1
	nfulnlCopyPacket  = 2
	nfulaPayload      = 9
	nfulaPrefix       = 10
	nflogCopyBytes    = 64 // enough for an IPv6 header and the ports
	nfnetlinkV0       = 0
	nflogSubsysHeader = unix.NFNL_SUBSYS_ULOG << 8
)

// nflog receives the packets the sandbox's firewall logs to its group.
type nflog struct{ c *netlink.Conn }

func dialNflog(group uint16) (*nflog, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("nflog: %w", err)
	}
	hdr := func(family uint8) []byte {
		b := []byte{family, nfnetlinkV0, 0, 0}
		binary.BigEndian.PutUint16(b[2:], group)
		return b
	}
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode, nflogCopyBytes)
	mode[4] = nfulnlCopyPacket
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: nfulaCfgCmd, Data: []byte{nfulnlCfgCmdBind}},
		{Type: nfulaCfgMode, Data: mode},
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	_, err = c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nflogSubsysHeader | nfulnlMsgConfig), Flags: netlink.Request | netlink.Acknowledge},
		Data:   append(hdr(unix.AF_UNSPEC), attrs...),
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("nflog bind group %d: %w", group, err)
	}
	return &nflog{c: c}, nil
}

// read blocks for the next batch of logged packets.
func (n *nflog) read() ([]sandbox.NetworkEvent, error) {
	msgs, err := n.c.Receive()
	if err != nil {
		return nil, err
	}
	var out []sandbox.NetworkEvent
	for _, m := range msgs {
		if m.Header.Type != netlink.HeaderType(nflogSubsysHeader|nfulnlMsgPacket) || len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			continue
		}
		e := sandbox.NetworkEvent{Time: time.Now().UTC()}
		var payload []byte
		for ad.Next() {
			switch ad.Type() {
			case nfulaPrefix:
				e.Reason = strings.TrimRight(string(ad.Bytes()), "\x00")
			case nfulaPayload:
				payload = ad.Bytes()
			}
		}
		e.Proto, e.Dst = describePacket(payload)
		out = append(out, e)
	}
	return out, nil
}

func (n *nflog) close() error { return n.c.Close() }

// describePacket returns the protocol and destination of an IP packet.
func describePacket(p []byte) (string, string) {
	if len(p) < 1 {
		return "?", ""
	}
	var proto byte
	var dst netip.Addr
	var l4 []byte
	switch p[0] >> 4 {
	case 4:
		if len(p) < 20 {
			return "ipv4", ""
		}
		proto, dst = p[9], netip.AddrFrom4([4]byte(p[16:20]))
		if ihl := int(p[0]&0xf) * 4; len(p) >= ihl {
			l4 = p[ihl:]
		}
	case 6:
		if len(p) < 40 {
			return "ipv6", ""
		}
		proto, dst, l4 = p[6], netip.AddrFrom16([16]byte(p[24:40])), p[40:]
	default:
		return "?", ""
	}
	name := map[byte]string{unix.IPPROTO_TCP: "tcp", unix.IPPROTO_UDP: "udp", unix.IPPROTO_ICMP: "icmp", unix.IPPROTO_ICMPV6: "icmpv6"}[proto]
	if name == "" {
		name = "ip proto " + strconv.Itoa(int(proto))
	}
	if (name == "tcp" || name == "udp") && len(l4) >= 4 {
		return name, netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:4])).String()
	}
	return name, dst.String()
}
