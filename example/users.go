package main

import (
	"crypto/rand"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/crypto/bcrypt"
)

// Limits on user names and passwords.
const (
	maxNameLen     = 64
	maxPasswordLen = 72 // bcrypt uses at most 72 bytes
)

// credential is a user name and its plain-text password, as configured.
// It exists only until newUserDB has hashed the password.
type credential struct {
	Name     string
	Password string
}

// parseUsers returns the demo user and the users of DEMO_USERS, a list
// "name:password,name:password". An entry for demo replaces its default
// password; any other name may appear only once.
func parseUsers(list string) ([]credential, error) {
	users := []credential{{Name: "demo", Password: "demo"}}
	seen := map[string]bool{}
	n := 0 // errors name an entry by its place: its text may hold a password
	for entry := range strings.SplitSeq(list, ",") {
		if n++; strings.TrimSpace(entry) == "" {
			continue
		}
		name, password, ok := strings.Cut(entry, ":")
		name = strings.TrimSpace(name)
		switch {
		case !ok:
			return nil, fmt.Errorf("entry %d: want name:password (a password holds no comma)", n)
		case !validName(name):
			return nil, fmt.Errorf("entry %d: a name has 1 to %d letters, digits or any of . _ -", n, maxNameLen)
		case password == "" || len(password) > maxPasswordLen:
			return nil, fmt.Errorf("user %q: a password has 1 to %d bytes", name, maxPasswordLen)
		case seen[name]:
			return nil, fmt.Errorf("user %q appears twice", name)
		}
		seen[name] = true
		if name == users[0].Name {
			users[0].Password = password
			continue
		}
		users = append(users, credential{Name: name, Password: password})
	}
	return users, nil
}

// validName reports whether name is an acceptable user name.
func validName(name string) bool {
	if name == "" || len(name) > maxNameLen {
		return false
	}
	for _, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("._-", r) {
			return false
		}
	}
	return true
}

// userDB checks passwords against bcrypt hashes. It never holds a plain-text
// password. It is read-only after newUserDB, so safe for concurrent use.
type userDB struct {
	hashes map[string][]byte
	// dummy is the hash that unknown users' passwords are compared with,
	// so that a login takes about as long whether the user exists or not.
	dummy []byte
}

// newUserDB hashes the users' passwords with bcrypt at the given cost
// (0: bcrypt.DefaultCost).
func newUserDB(users []credential, cost int) (*userDB, error) {
	cost = hashCost(cost)
	db := &userDB{hashes: make(map[string][]byte, len(users))}
	for _, u := range users {
		h, err := bcrypt.GenerateFromPassword([]byte(u.Password), cost)
		if err != nil {
			return nil, fmt.Errorf("hash password of %q: %w", u.Name, err)
		}
		db.hashes[u.Name] = h
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte(rand.Text()), cost)
	if err != nil {
		return nil, fmt.Errorf("hash dummy password: %w", err)
	}
	db.dummy = dummy
	return db, nil
}

// hashCost returns the bcrypt cost to use for c (0: the default).
func hashCost(c int) int {
	if c == 0 {
		return bcrypt.DefaultCost
	}
	return c
}

// authenticate reports whether password is the password of user name. It
// costs one bcrypt comparison whether the user exists or not.
func (db *userDB) authenticate(name, password string) bool {
	hash, known := db.hashes[name]
	if !known {
		hash = db.dummy
	}
	err := bcrypt.CompareHashAndPassword(hash, []byte(password))
	return known && err == nil
}
