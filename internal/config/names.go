package config

import "github.com/outboxd/outboxd/lib/field"

// SettingNames renders the settings the components' messages name, by their
// field paths in pipeline.Config ("Stream.Slot"), as this Config was
// given them: a pipeline of a pipelines file by its keys ("`slot`"), any
// other by its flags ("--slot"). A field no flag sets keeps its path.
func (c *Config) SettingNames() field.Names {
	byField := fieldFlags()
	key := func(path string) string { return byField[path] }
	if c.fromFile {
		return field.Names{Key: key}
	}
	return field.Flags(key)
}

// SlotNames are Names for the slot package's messages (see
// cdc.Config.SlotNames), as migrate and status call it.
func (c *Config) SlotNames() field.Names {
	s := c.Stream
	s.Names = c.SettingNames().Under("Stream")
	return s.SlotNames()
}

// fieldFlags maps each component field a flag sets ("Stream.Slot", its
// flagSpec.field) to that flag's name.
func fieldFlags() map[string]string {
	m := map[string]string{}
	for _, f := range flags() {
		if f.field != "" {
			m[f.field] = f.name
		}
	}
	return m
}
