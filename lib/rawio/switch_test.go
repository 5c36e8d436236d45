package rawio

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/outboxd/outboxd/harness/netfault"
)

func TestParseSwitch(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		v       string
		on, err bool
	}{
		{"", true, false},
		{"on", true, false},
		{"true", true, false},
		{"1", true, false},
		{"ON", true, false},
		{"off", false, false},
		{" Off ", false, false},
		{"false", false, false},
		{"0", false, false},
		{"no", true, true}, // neither: stays on, and CheckEnv says so
		{"of", true, true},
	} {
		on, err := parseSwitch(tt.v)
		if on != tt.on || (err != nil) != tt.err {
			t.Errorf("parseSwitch(%q) = %v, %v; want %v, error %v", tt.v, on, err, tt.on, tt.err)
		}
	}
}

// With raw I/O off, Wrap, Dialer and SocketOf hand back plain
// connections and no socket: nothing makes a raw system call.
func TestSwitchOff(t *testing.T) {
	t.Setenv(EnvVar, "off")
	if Enabled() || CheckEnv() != nil {
		t.Fatalf("%s=off: Enabled %v, CheckEnv %v", EnvVar, Enabled(), CheckEnv())
	}
	c, _ := netfault.TCPPair(t)
	if w := Wrap(c); w != c {
		t.Errorf("Wrap returned %T, want the connection itself", w)
	}
	if SocketOf(c) != nil {
		t.Error("SocketOf returned a socket")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d, err := Dialer(10*time.Second, nil)(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if _, ok := d.(*net.TCPConn); !ok {
		t.Errorf("Dialer returned %T, want a plain *net.TCPConn", d)
	}
}

func TestCheckEnv(t *testing.T) {
	t.Setenv(EnvVar, "yes please")
	if err := CheckEnv(); err == nil {
		t.Errorf("%s=%q: CheckEnv found nothing wrong", EnvVar, "yes please")
	}
	if !Enabled() {
		t.Errorf("%s=%q: raw I/O off, want it left on", EnvVar, "yes please")
	}
}
