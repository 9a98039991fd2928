package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/seal"
)

// SealKeyFile is the sealing key a node on the embedded store keeps in
// its data directory when none is configured (DataDirSealing): an X25519
// private key in PEM, as openssl genpkey -algorithm X25519 writes it,
// readable by its owner only.
const SealKeyFile = "seal.key"

// DataDirSealing returns cfg sealing endpoint credentials with the key in
// the embedded store's data directory ([replicator] seal_public_key_file
// and seal_private_key_files naming SealKeyFile there), so that a laptop's
// node (make run) seals them by default, as it creates its first admin:
//
//   - only on the embedded store with a data directory: an in-memory store
//     keeps nothing at rest, and a FoundationDB cluster's nodes each
//     configure the key of their role (docs/DEPLOY.md);
//   - only when cfg names no key of its own (neither setting);
//   - the key is made, and said once on stderr and in the log, when
//     generate (a node or process that runs both roles on the store: it
//     seals and opens) and the directory holds none; a node that finds
//     one there uses it whatever its roles, since the store's credentials
//     are sealed to it.
//
// Credentials a store holds in the clear from before are sealed by the
// replication nodes' reseal pass. The caller holds the store (its lock),
// so no other process makes a key in the directory meanwhile.
func DataDirSealing(cfg *config.Config, generate bool, lg Log) (*config.Config, error) {
	dir := cfg.String("fdb", "data_dir")
	if cfg.String("fdb", "backend") != "embedded" || cfg.Bool("fdb", "in_memory") || dir == "" ||
		cfg.String("replicator", "seal_public_key_file") != "" || len(cfg.List("replicator", "seal_private_key_files")) > 0 {
		return cfg, nil
	}
	path := filepath.Join(dir, SealKeyFile)
	_, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !generate:
		return cfg, nil
	case errors.Is(err, fs.ErrNotExist):
		if err := writeSealKey(path); err != nil {
			return nil, fmt.Errorf("sealing key in the data directory: %w", err)
		}
		fmt.Fprintf(lg.stderr, "\nfdbrep: no sealing key was configured, so this one was created: %s\n\n"+
			"Endpoint credentials (the passwords of replications) are sealed with it before they are stored,\n"+
			"and reads show them as *****. Keep it with the data directory: without it they cannot be opened.\n"+
			"Nodes on FoundationDB configure their own ([replicator] seal_public_key_file and\n"+
			"seal_private_key_files; docs/DEPLOY.md).\n\n", path)
		lg.Info().Str("file", path).Msg("config: no sealing key was configured; created one in the data directory")
	case err != nil:
		return nil, fmt.Errorf("sealing key in the data directory: %w", err)
	}
	return cfg.With(config.Layer{Source: "the data directory's sealing key", Values: map[string]map[string]string{
		"replicator": {"seal_public_key_file": path, "seal_private_key_files": path}}})
}

// writeSealKey writes a new private key to path, owner-only, whole or not
// at all.
func writeSealKey(path string) error {
	private, _, err := seal.GenerateKey()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), SealKeyFile+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(private); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
