// Package deploy is where a deployment's role configuration files live,
// one per role (api_frontend.ini, replication.ini): the same file on every
// host of the role, with what differs from host to host (the node's name
// and address, the cluster file's path, secrets) in the host's environment
// (FDBREP_<SECTION>__<KEY>, docs/CONFIG.md). docs/DEPLOY.md is the
// operator's guide. The Dockerfile copies the files into the image's
// ImageDir, docker-compose.yml runs each role's services with their file,
// and the deployment test (cmd/internal/deploy) runs fdbrep serve with
// them; cmd/fdbrep's compose test checks that compose and the image say
// what that test runs.
package deploy

import "github.com/fdbrep/fdbrep/pkg/config"

// ImageDir is the directory of the role files in the container image.
const ImageDir = "/etc/fdbrep"

// Roles are the roles that have a file here; each file's node runs its
// role only.
var Roles = []string{config.RoleAPIFrontend, config.RoleReplication}

// File is the name of role's file, in this directory and in ImageDir.
func File(role string) string { return role + ".ini" }

// HostVariables are, per role, the environment variables that may carry a
// host's own settings; everything else comes from the role's file.
var HostVariables = map[string][]string{
	config.RoleAPIFrontend: append([]string{"FDBREP_NODE__NAME", "FDBREP_CHTTPD__BIND_ADDRESS", "FDBREP_FDB__CLUSTER_FILE",
		"FDBREP_ADMINS__ADMIN", "FDBREP_CHTTPD_AUTH__SECRET", SealVariables[config.RoleAPIFrontend]}, TLSVariables...),
	config.RoleReplication: append([]string{"FDBREP_NODE__NAME", "FDBREP_FDB__CLUSTER_FILE",
		SealVariables[config.RoleReplication]}, TLSVariables...),
}

// SealVariables are, per role, the host variable of the sealing key files
// ([replicator] seal_public_key_file on frontends, seal_private_key_files
// on replication nodes), set where a host keeps them elsewhere than the
// role files say, or empty to store credentials as written.
var SealVariables = map[string]string{
	config.RoleAPIFrontend: "FDBREP_REPLICATOR__SEAL_PUBLIC_KEY_FILE",
	config.RoleReplication: "FDBREP_REPLICATOR__SEAL_PRIVATE_KEY_FILES",
}

// TLSVariables are the host variables of the FoundationDB client's TLS
// files ([fdb] tls_*), set where a host keeps them elsewhere than the role
// files say, or empty for a cluster without TLS.
var TLSVariables = []string{"FDBREP_FDB__TLS_CERTIFICATE_FILE", "FDBREP_FDB__TLS_KEY_FILE", "FDBREP_FDB__TLS_CA_FILE"}
