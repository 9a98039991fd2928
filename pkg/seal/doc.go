// Package seal encrypts endpoint credentials for the store so that only
// the nodes holding a private key can read them back.
//
// A sealed value is HPKE (RFC 9180, Go's crypto/hpke) to an X25519 key:
// DHKEM(X25519, HKDF-SHA256), HKDF-SHA256 and AES-256-GCM, with the
// caller's context (what the value belongs to) and binding (what it may
// be used for: the replicator's is where the credential is sent) as
// associated data, so a value copied under another context, or opened
// for another use, does not open. It is a string, safe in JSON and in
// URLs' userinfo:
//
//	fdbrep-sealed:v1:<key id>.b:<base64url of the encapsulated key and ciphertext>
//
// where the key id is the first 8 bytes, in hex, of the SHA-256 of the
// public key: a node names the key a value needs without holding it.
// Values sealed before bindings existed have no ".b" and were sealed
// under the context alone: they still open, for any binding (Bound tells
// them apart), until Reseal binds them. Nodes of those versions take a
// bound value for one sealed to a key they lack (its key id reads
// "<key id>.b"), and leave it alone.
//
// Keys are PEM files as OpenSSL writes them:
//
//	openssl genpkey -algorithm X25519 -out seal.key        # replication nodes
//	openssl pkey -in seal.key -pubout -out seal.pub        # api_frontend nodes
//
// A Sealer holds a public key only: the nodes that write credentials (the
// api_frontend role) seal but cannot open. An Opener holds one or more
// private keys, the first current: the nodes that run jobs open values
// sealed to any of them, so a key is rotated by sealing to a new one while
// the old stays listed; Reseal moves a value to the current key (the
// replication nodes' reseal pass moves every stored value so, after which
// the old key can be dropped).
package seal
