package main

import (
	"runtime/debug"
	"time"
)

// version is the build's version when set with -ldflags "-X
// main.version=…" (make build sets it from git, as below: Go stamps no
// build made in a git worktree, nor one with -buildvcs=false); empty,
// buildVersion reads it from the build.
var version string

// VersionUnknown is the version of a build that carries none: not set
// with -ldflags, not a module version, no version control stamp (a build
// outside a checkout, -buildvcs=false).
const VersionUnknown = "dev"

// buildVersion is the version a node reports (GET /, /_membership,
// Fauxton) and fdbrep version prints, so that a bug report carries one.
func buildVersion() string {
	info, _ := debug.ReadBuildInfo()
	return versionOf(version, info)
}

// versionOf is set when not empty; else the module's version of a build
// of a released module (go install …@v1.2.3, or Go's own stamp of a
// checkout); else, from the version control stamp of a build in a
// checkout, a pseudo-version as Go writes them,
// v0.0.0-<commit time, UTC>-<12 digits of the commit>, with "+dirty" when
// the checkout had changes; else VersionUnknown.
func versionOf(set string, info *debug.BuildInfo) string {
	if set != "" {
		return set
	}
	if info == nil {
		return VersionUnknown
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, at string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return VersionUnknown
	}
	v := "v0.0.0-"
	if t, err := time.Parse(time.RFC3339, at); err == nil {
		v += t.UTC().Format("20060102150405") + "-"
	}
	v += rev[:min(len(rev), 12)]
	if dirty {
		v += "+dirty"
	}
	return v
}
