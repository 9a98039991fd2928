package seal

import (
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Prefix starts every sealed value.
const Prefix = "fdbrep-sealed:v1:"

// boundMark ends the key id field of a value sealed with a binding (see
// the package doc).
const boundMark = ".b"

var (
	// ErrKeyFile is a key file that cannot be used.
	ErrKeyFile = errors.New("seal: key file")
	// ErrNoKey is a value sealed to a key this node does not hold.
	ErrNoKey = errors.New("seal: no key for this value")
	// ErrCorrupt is a value that is not a sealed value, was altered, or
	// was sealed under another context.
	ErrCorrupt = errors.New("seal: the value does not open")
)

// info binds every sealed value to this use and format: infoBound those
// sealed with a binding, info those sealed before bindings existed.
var (
	info      = []byte("fdbrep credentials v1")
	infoBound = []byte("fdbrep credentials v1 bound")
)

// suite is the HPKE cipher suite.
var (
	kdf  = hpke.HKDFSHA256()
	aead = hpke.AES256GCM()
)

// Sealer seals values to one public key. It is safe for concurrent use.
type Sealer struct {
	pub hpke.PublicKey
	id  string
}

// ID is the key id the Sealer's values carry.
func (s *Sealer) ID() string { return s.id }

// Seal seals plaintext under context and binding (the same pair opens
// it): context names what the value belongs to, binding what it may be
// used for.
func (s *Sealer) Seal(plaintext string, context, binding []byte) (string, error) {
	enc, snd, err := hpke.NewSender(s.pub, kdf, aead, infoBound)
	if err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	ct, err := snd.Seal(boundAAD(context, binding), []byte(plaintext))
	if err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	return Prefix + s.id + boundMark + ":" + base64.RawURLEncoding.EncodeToString(append(enc, ct...)), nil
}

// boundAAD is the associated data of a bound value: context's length,
// context and binding, so that no other pair gives the same bytes.
func boundAAD(context, binding []byte) []byte {
	aad := binary.AppendUvarint(nil, uint64(len(context)))
	return append(append(aad, context...), binding...)
}

// IsSealed reports whether v has the form of a sealed value.
func IsSealed(v string) bool { return strings.HasPrefix(v, Prefix) }

// KeyID returns the id of the key v was sealed to; ok is false when v is
// not a sealed value.
func KeyID(v string) (id string, ok bool) {
	id, _, ok = parse(v)
	return id, ok
}

// Bound reports whether v is a sealed value with a binding; one sealed
// before bindings existed is not, and opens whatever binding is given.
func Bound(v string) bool {
	_, bound, ok := parse(v)
	return ok && bound
}

// parse splits the key id field of sealed value v.
func parse(v string) (id string, bound, ok bool) {
	rest, ok := strings.CutPrefix(v, Prefix)
	if !ok {
		return "", false, false
	}
	field, _, ok := strings.Cut(rest, ":")
	id, bound = strings.CutSuffix(field, boundMark)
	return id, bound, ok && id != ""
}

// Opener opens values sealed to any of its private keys. It is safe for
// concurrent use.
type Opener struct {
	keys    map[string]hpke.PrivateKey
	current *Sealer
}

// Current is the Sealer of the Opener's first key, to which Reseal moves
// values.
func (o *Opener) Current() *Sealer { return o.current }

// Open returns the plaintext of v, sealed under context and binding. A
// value sealed before bindings existed (Bound false) opens under its
// context alone, whatever binding is given. A value sealed to a key the
// Opener lacks is ErrNoKey, naming the key id; anything else that does
// not open (another context or binding included) is ErrCorrupt.
func (o *Opener) Open(v string, context, binding []byte) (string, error) {
	id, bound, ok := parse(v)
	if !ok {
		return "", fmt.Errorf("%w: not a sealed value", ErrCorrupt)
	}
	k, ok := o.keys[id]
	if !ok {
		return "", fmt.Errorf("%w: it was sealed to key %s, which is not among this node's keys", ErrNoKey, id)
	}
	in, aad := info, context
	if bound {
		in, aad = infoBound, boundAAD(context, binding)
	}
	raw, err := base64.RawURLEncoding.DecodeString(v[strings.LastIndexByte(v, ':')+1:])
	encLen := 32 // X25519's encapsulated key
	if err != nil || len(raw) < encLen {
		return "", fmt.Errorf("%w: malformed", ErrCorrupt)
	}
	rcp, err := hpke.NewRecipient(raw[:encLen], k, kdf, aead, in)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	pt, err := rcp.Open(aad, raw[encLen:])
	if err != nil {
		return "", fmt.Errorf("%w: altered, or sealed for something else", ErrCorrupt)
	}
	return string(pt), nil
}

// Stale reports whether v is sealed to a key other than the current one
// (Reseal moves it, as it binds a value sealed before bindings existed).
func (o *Opener) Stale(v string) bool {
	id, ok := KeyID(v)
	return ok && id != o.current.id
}

// Holds reports whether v is sealed to one of o's keys.
func (o *Opener) Holds(v string) bool {
	id, ok := KeyID(v)
	_, held := o.keys[id]
	return ok && held
}

// Reseal opens v under context and binding and seals it again to the
// current key, bound; a bound value already sealed to it is returned as
// it is. A value sealed before bindings existed gets binding so.
func (o *Opener) Reseal(v string, context, binding []byte) (string, error) {
	if !o.Stale(v) && Bound(v) {
		return v, nil
	}
	pt, err := o.Open(v, context, binding)
	if err != nil {
		return "", err
	}
	return o.current.Seal(pt, context, binding)
}

// LoadPublicKey reads a PEM public key ("PUBLIC KEY", X25519) from path,
// or the public half of a private key file.
func LoadPublicKey(path string) (*Sealer, error) {
	block, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	var pub *ecdh.PublicKey
	switch block.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w %s: %v", ErrKeyFile, path, err)
		}
		p, ok := k.(*ecdh.PublicKey)
		if !ok || p.Curve() != ecdh.X25519() {
			return nil, fmt.Errorf("%w %s: a %T, not an X25519 public key (openssl pkey -in seal.key -pubout)", ErrKeyFile, path, k)
		}
		pub = p
	case "PRIVATE KEY":
		priv, err := parsePrivate(path, block)
		if err != nil {
			return nil, err
		}
		pub = priv.PublicKey()
	default:
		return nil, fmt.Errorf("%w %s: a PEM %q block, not an X25519 public key", ErrKeyFile, path, block.Type)
	}
	return sealerOf(pub)
}

// LoadPrivateKeys reads PEM private keys ("PRIVATE KEY", X25519, as
// openssl genpkey -algorithm X25519 writes them); the first is current.
func LoadPrivateKeys(paths ...string) (*Opener, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no private key file", ErrKeyFile)
	}
	o := &Opener{keys: make(map[string]hpke.PrivateKey, len(paths))}
	for i, path := range paths {
		block, err := readPEM(path)
		if err != nil {
			return nil, err
		}
		if block.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("%w %s: a PEM %q block, not an X25519 private key", ErrKeyFile, path, block.Type)
		}
		priv, err := parsePrivate(path, block)
		if err != nil {
			return nil, err
		}
		s, err := sealerOf(priv.PublicKey())
		if err != nil {
			return nil, err
		}
		k, err := hpke.NewDHKEMPrivateKey(priv)
		if err != nil {
			return nil, fmt.Errorf("%w %s: %v", ErrKeyFile, path, err)
		}
		o.keys[s.id] = k
		if i == 0 {
			o.current = s
		}
	}
	return o, nil
}

func readPEM(path string) (*pem.Block, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%w %s: no PEM block", ErrKeyFile, path)
	}
	return block, nil
}

func parsePrivate(path string, block *pem.Block) (*ecdh.PrivateKey, error) {
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrKeyFile, path, err)
	}
	priv, ok := k.(*ecdh.PrivateKey)
	if !ok || priv.Curve() != ecdh.X25519() {
		return nil, fmt.Errorf("%w %s: a %T, not an X25519 private key (openssl genpkey -algorithm X25519)", ErrKeyFile, path, k)
	}
	return priv, nil
}

func sealerOf(pub *ecdh.PublicKey) (*Sealer, error) {
	p, err := hpke.NewDHKEMPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKeyFile, err)
	}
	sum := sha256.Sum256(pub.Bytes())
	return &Sealer{pub: p, id: hex.EncodeToString(sum[:8])}, nil
}

// GenerateKey returns a new X25519 key pair as PEM files would hold them:
// the private key (PKCS #8) and its public key (PKIX), as OpenSSL writes
// them.
func GenerateKey() (private, public []byte, err error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(k.PublicKey())
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), nil
}
