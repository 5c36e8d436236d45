package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// publisher is one `outboxd run` child process.
type publisher struct {
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	lines  []string
	logOut io.Writer
	name   string
}

// publishers starts `outboxd run` processes with one configuration.
type publishers struct {
	binary  string
	url     string // database URL; each process gets its own application_name
	args    []string
	env     []string
	logOut  io.Writer // child stderr goes here too, prefixed; nil: discarded
	started int
}

// start starts one more process; extra flags are added to the set's.
func (f *publishers) start(extra ...string) (*publisher, error) {
	f.started++
	p := &publisher{done: make(chan struct{}), logOut: f.logOut, name: fmt.Sprintf("outboxd#%d", f.started)}
	p.cmd = exec.Command(f.binary, append(append([]string{"run"}, f.args...), extra...)...)
	p.cmd.Env = append(os.Environ(), f.env...)
	p.cmd.Env = append(p.cmd.Env, "OUTBOXD_DATABASE_URL="+f.url+"&application_name="+p.appName())
	if err := p.launch(); err != nil {
		return nil, err
	}
	return p, nil
}

// launch starts p.cmd, keeping its stderr lines (and copying them to
// p.logOut, prefixed); p.done closes when it exited.
func (p *publisher) launch() error {
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.cmd.Path, err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			if p.logOut != nil {
				fmt.Fprintf(p.logOut, "%s: %s\n", p.name, sc.Text())
			}
			p.mu.Unlock()
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return nil
}

// appName is the process's application_name in pg_stat_replication.
func (p *publisher) appName() string { return strings.ReplaceAll(p.name, "#", "-") }

// waitLog waits until the process logged a line containing s.
func (p *publisher) waitLog(ctx context.Context, s string) error {
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.Contains(l, s) {
				p.mu.Unlock()
				return nil
			}
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never logged %q: %w", p.name, s, ctx.Err())
		case <-p.done:
			return fmt.Errorf("%s exited (code %d) before logging %q; log tail:\n%s", p.name, p.cmd.ProcessState.ExitCode(), s, p.tail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (p *publisher) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines[max(0, len(p.lines)-20):], "\n")
}

// kill sends SIGKILL and waits for the exit.
func (p *publisher) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// terminate sends SIGTERM and returns the exit code.
func (p *publisher) terminate(timeout time.Duration) (int, error) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-time.After(timeout):
		p.kill()
		return -1, fmt.Errorf("%s did not exit within %s of SIGTERM", p.name, timeout)
	}
}

// exited reports whether the process ended, and how.
func (p *publisher) exited() (bool, int) {
	select {
	case <-p.done:
		return true, p.cmd.ProcessState.ExitCode()
	default:
		return false, 0
	}
}
