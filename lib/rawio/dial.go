package rawio

import (
	"context"
	"crypto/tls"
	"net"
	"time"
)

// Dialer returns a dial function (for kgo.Dialer) that dials TCP within
// timeout, wraps the connection (Wrap), and with tlsConfig runs the TLS
// handshake over it: the TLS records are then read and written raw too.
// A config without ServerName gets the dialed address's host, as
// tls.Dialer does.
func Dialer(timeout time.Duration, tlsConfig *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if tlsConfig == nil {
		return DialerTLS(timeout, nil)
	}
	return DialerTLS(timeout, func() (*tls.Config, error) { return tlsConfig, nil })
}

// DialerTLS is Dialer with the TLS configuration asked of tlsConfig for
// each connection (nil: plain TCP), so that it may change between
// connections (certificates renewed in place: package tlsfiles).
func DialerTLS(timeout time.Duration, tlsConfig func() (*tls.Config, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var tc *tls.Config
		if tlsConfig != nil {
			cfg, err := tlsConfig()
			if err != nil {
				return nil, err
			}
			tc = cfg.Clone()
		}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c = Wrap(c)
		if tc == nil {
			return c, nil
		}
		if tc.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				c.Close()
				return nil, err
			}
			tc.ServerName = host
		}
		t := tls.Client(c, tc)
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		if err := t.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return t, nil
	}
}
