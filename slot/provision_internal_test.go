package slot

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// decide is the one create / adopt / refuse / backfill decision of run and
// migrate (issue 38: migrate wrote it again), tested here without servers.
func TestDecide(t *testing.T) {
	t.Parallel()
	here := ServerID{SystemID: "7001", Timeline: 2}
	exists := Status{Slot: "s", Exists: true}
	missing := Status{Slot: "s"}
	created := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	done := Record{Slot: "s", SystemID: "7001", Timeline: 2, CreatedBy: CreatedByRun, CreatedAt: created}
	pending := done
	pending.BackfillWhere = "published_at IS NULL"
	blank := done
	blank.BackfillWhere = " \t"
	for _, tc := range []struct {
		name     string
		f        facts
		want     plan
		errIs    error
		errWants []string
	}{
		// run without --create-slot
		{name: "run: the slot exists", f: facts{st: exists, found: true, rec: done, create: CreateNever, backfill: true},
			want: plan{step: stepAdopt}},
		{name: "run: never created", f: facts{st: missing, create: CreateNever, backfill: true},
			errIs: ErrMissing, errWants: []string{"outboxd migrate", "--create-slot --backfill-where"}},
		{name: "run: lost", f: facts{st: missing, found: true, rec: done, create: CreateNever, backfill: true},
			errIs: ErrMissing, errWants: []string{"is gone", "in no slot"}},
		{name: "run: an unfinished backfill on an existing slot is run again, even without --create-slot",
			f:    facts{st: exists, found: true, rec: pending, create: CreateNever, backfill: true},
			want: plan{step: stepRerun, where: "published_at IS NULL"}},
		{name: "run: an unfinished backfill whose slot is gone needs --create-slot",
			f:     facts{st: missing, found: true, rec: pending, create: CreateNever, backfill: true},
			errIs: ErrMissing, errWants: []string{"Its backfill (published_at IS NULL) had not finished either"}},
		// run --create-slot
		{name: "run --create-slot: fresh", f: facts{st: missing, create: CreateMissing, backfill: true},
			want: plan{step: stepCreate}},
		{name: "run --create-slot --backfill-where: fresh", f: facts{st: missing, create: CreateMissing, backfill: true, where: "true"},
			want: plan{step: stepCreate, where: "true"}},
		{name: "run --create-slot: lost, created again", f: facts{st: missing, found: true, rec: done, create: CreateMissing, backfill: true, where: "x > 1"},
			want: plan{step: stepCreateLost, where: "x > 1"}},
		{name: "run --create-slot: the slot exists, no backfill", f: facts{st: exists, found: true, rec: done, create: CreateMissing, backfill: true, where: "true"},
			want: plan{step: stepAdopt}},
		{name: "run --create-slot: an unfinished backfill and a new predicate are both owed",
			f:    facts{st: missing, found: true, rec: pending, create: CreateMissing, backfill: true, where: "x > 1"},
			want: plan{step: stepRerun, where: "(published_at IS NULL) OR (x > 1)"}},
		{name: "run --create-slot: the same predicate again", f: facts{st: exists, found: true, rec: pending, create: CreateMissing, backfill: true, where: "published_at IS NULL"},
			want: plan{step: stepRerun, where: "published_at IS NULL"}},
		{name: "an unfinished backfill while others may write outboxd_slots",
			f:        facts{slot: "s", st: exists, found: true, rec: pending, create: CreateMissing, backfill: true, writers: []string{"intruder"}},
			errWants: []string{"intruder", "revoke"}},
		{name: "an unfinished backfill with a blank stored predicate",
			f:        facts{slot: "s", st: exists, found: true, rec: blank, create: CreateMissing, backfill: true},
			errWants: []string{"outboxd_slots", "blank", "correct or delete that row"}},
		// migrate
		{name: "migrate: fresh install", f: facts{st: missing, create: CreateOnFreshInstall},
			want: plan{step: stepCreate}},
		{name: "migrate: the slot exists", f: facts{st: exists, create: CreateOnFreshInstall},
			want: plan{step: stepAdopt}},
		{name: "migrate: lost, never created again", f: facts{st: missing, found: true, rec: done, create: CreateOnFreshInstall},
			errIs: ErrMissing, errWants: []string{"is gone", "outboxd run --create-slot --backfill-where"}},
		{name: "migrate leaves an unfinished backfill to run", f: facts{st: exists, found: true, rec: pending, create: CreateOnFreshInstall},
			want: plan{step: stepAdopt}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.slot, tc.f.server, tc.f.names = "s", here, flagNames
			got, err := decide(tc.f)
			if tc.errIs == nil && tc.errWants == nil {
				if err != nil || got != tc.want {
					t.Fatalf("decide = %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("decide = %+v, want a refusal", got)
			}
			if tc.errIs != nil && !errors.Is(err, tc.errIs) {
				t.Errorf("error %v does not wrap %v", err, tc.errIs)
			}
			for _, w := range tc.errWants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// A slot on a standby or of another database is refused before anything
// else is read or decided; a standby is refused unless decoding there was
// asked for (a primary URL) and the server can (16+).
func TestRefuse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		st      Status
		primary string
		want    error
		says    []string
	}{
		{name: "a usable slot", st: Status{Slot: "s", Exists: true, ServerVersion: 160000}},
		{name: "a usable slot, primary URL unused", st: Status{Slot: "s", Exists: true, ServerVersion: 160000}, primary: "postgres://p/app"},
		{name: "a standby without a primary URL", st: Status{Slot: "s", InRecovery: true, ServerVersion: 160000},
			want: ErrStandby, says: []string{"--primary-url", "16+", "--database-url"}},
		{name: "a 15 standby with a primary URL", st: Status{Slot: "s", InRecovery: true, ServerVersion: 150004}, primary: "postgres://p/app",
			want: ErrStandby, says: []string{"primary only"}},
		{name: "a 16 standby with a primary URL", st: Status{Slot: "s", InRecovery: true, ServerVersion: 160000}, primary: "postgres://p/app"},
		{name: "another database's slot", st: Status{Slot: "s", Exists: true, OtherDatabase: true, Database: "other", CurrentDatabase: "app"},
			want: ErrUnusable, says: []string{`belongs to database "other"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := refuse(tc.st, tc.primary, flagNames)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refuse = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("refuse = %v, want %v", err, tc.want)
			}
			for _, w := range tc.says {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refuse does not say %q: %v", w, err)
				}
			}
		})
	}
}

// ProvisionConfig.Validate reports every problem at once, for library users too
// (the command's flag checks are not the only guard).
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := ProvisionConfig{DatabaseURL: "postgres://x", Slot: "s"}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(minimal) = %v", err)
	}
	fresh := ProvisionConfig{DatabaseURL: "postgres://x", Slot: "s", Create: CreateOnFreshInstall, Table: "app.outbox"}
	if err := fresh.Validate(); err != nil {
		t.Errorf("Validate(fresh install) = %v", err)
	}
	for _, tc := range []struct {
		name  string
		cfg   ProvisionConfig
		wants []string
	}{
		{"empty", ProvisionConfig{}, []string{"DatabaseURL: required", "Slot: must not be empty"}},
		{"a slot name PostgreSQL refuses", ProvisionConfig{DatabaseURL: "u", Slot: "Outboxd"}, []string{"lower-case"}},
		{"bad failover and policy", ProvisionConfig{DatabaseURL: "u", Slot: "s", Failover: "maybe", Create: "sometimes"},
			[]string{`Failover: failover slot mode "maybe"`, `Create: "sometimes"`}},
		{"backfill without create", ProvisionConfig{DatabaseURL: "u", Slot: "s", BackfillWhere: "\x00"},
			[]string{"goes with creating the slot", "needs a Backfiller", "NUL"}},
		{"fresh install without a table", ProvisionConfig{DatabaseURL: "u", Slot: "s", Create: CreateOnFreshInstall},
			[]string{"needs the outbox table"}},
	} {
		err := tc.cfg.Validate()
		if err == nil {
			t.Errorf("%s: Validate = nil", tc.name)
			continue
		}
		for _, w := range tc.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error does not say %q:\n%v", tc.name, w, err)
			}
		}
	}
}
