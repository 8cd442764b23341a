/* Keys. The master key (32 bytes as 64 hex characters: in a 0600 file, in
 * $IDEMD_MASTER_KEY, or a systemd credential) seals signing keys with
 * crypto_secretbox; signing keys live in sodium_malloc'd (locked, guarded)
 * memory and are wiped on reload and shutdown. A master key that cannot
 * open the database's signing keys is refused before anything is written. */
#include "keys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "store.h"

struct keys_entry {
	uint32_t ke_id;
	int ke_active;
	uint8_t ke_key[TOKEN_KEY_BYTES];
};

static struct {
	pthread_rwlock_t lock;
	uint8_t *master;	    /* sodium_malloc, crypto_secretbox_KEYBYTES */
	struct keys_entry *entries; /* sodium_malloc */
	size_t n;
	uint32_t newest;
} keys = { PTHREAD_RWLOCK_INITIALIZER, NULL, NULL, 0, 0 };

static struct {
	int resolved;
	enum keys_source src;
	char path[4096]; /* the file read (KEYS_SRC_FILE, KEYS_SRC_CREDENTIAL) */
	char where[4200];
} keys_src;

enum keys_source keys_master_source(const char *path, const char **where)
{
	if (!keys_src.resolved) {
		const char *dir = getenv("CREDENTIALS_DIRECTORY");
		keys_src.resolved = 1;
		if (getenv(KEYS_MASTER_ENV) != NULL) {
			keys_src.src = KEYS_SRC_ENV;
			snprintf(keys_src.where, sizeof(keys_src.where),
				 "the master key in $" KEYS_MASTER_ENV);
		} else if (dir != NULL && dir[0] != '\0' &&
			   (size_t)snprintf(keys_src.path, sizeof(keys_src.path), "%s/%s", dir,
					    KEYS_MASTER_CREDENTIAL) < sizeof(keys_src.path) &&
			   access(keys_src.path, F_OK) == 0) {
			keys_src.src = KEYS_SRC_CREDENTIAL;
			snprintf(keys_src.where, sizeof(keys_src.where),
				 "the master key file %s (systemd credential)", keys_src.path);
		} else {
			keys_src.src = KEYS_SRC_FILE;
			snprintf(keys_src.path, sizeof(keys_src.path), "%s", path);
			snprintf(keys_src.where, sizeof(keys_src.where), "the master key file %s",
				 path);
		}
	}
	if (where != NULL)
		*where = keys_src.where;
	return keys_src.src;
}

int keys_master_create(const char *path, int *created)
{
	uint8_t raw[crypto_secretbox_KEYBYTES];
	char hex[2 * sizeof(raw) + 2], tmp[4200];

	*created = 0;
	if (access(path, F_OK) == 0)
		return 0;
	/* written whole under a temporary name, then linked into place: a
	 * concurrent migrate never reads a half-written key, and of two
	 * creators one wins (link refuses an existing name) */
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= sizeof(tmp)) {
		log_error("keys: master key file name too long: %s", path);
		return -1;
	}
	int fd = mkstemp(tmp); /* mode 0600 */
	if (fd < 0) {
		log_error("keys: cannot create master key file %s: %s", path, strerror(errno));
		return -1;
	}
	randombytes_buf(raw, sizeof(raw));
	sodium_bin2hex(hex, sizeof(hex), raw, sizeof(raw));
	sodium_memzero(raw, sizeof(raw));
	size_t n = strlen(hex);
	hex[n++] = '\n';
	ssize_t w = write(fd, hex, n);
	sodium_memzero(hex, sizeof(hex));
	int ok = w == (ssize_t)n && fsync(fd) == 0;
	if (close(fd) != 0)
		ok = 0;
	if (!ok) {
		log_error("keys: cannot write master key file %s", path);
		unlink(tmp);
		return -1;
	}
	int rc = link(tmp, path);
	int err = errno;
	unlink(tmp);
	if (rc != 0 && err != EEXIST) {
		log_error("keys: cannot create master key file %s: %s", path, strerror(err));
		return -1;
	}
	*created = rc == 0;
	return 0;
}

/* Decodes the hex text TEXT[0..N) into a new locked buffer *OUT. */
static int keys_decode(const char *text, size_t n, const char *where, uint8_t **out)
{
	size_t bin_len = 0;
	const char *end = NULL;

	*out = sodium_malloc(crypto_secretbox_KEYBYTES);
	if (*out == NULL) {
		log_error("keys: out of locked memory for %s", where);
		return -1;
	}
	int bad = sodium_hex2bin(*out, crypto_secretbox_KEYBYTES, text, n, NULL, &bin_len, &end) !=
			  0 ||
		  bin_len != crypto_secretbox_KEYBYTES;
	/* a trailing newline (or other white space) is fine, nothing else is */
	for (const char *p = end; !bad && p < text + n; p++)
		bad = *p != '\n' && *p != '\r' && *p != ' ' && *p != '\t';
	if (bad) {
		log_error("keys: %s must hold %d hex characters", where,
			  2 * crypto_secretbox_KEYBYTES);
		sodium_free(*out);
		*out = NULL;
		return -1;
	}
	sodium_mprotect_readonly(*out);
	return 0;
}

/* Reads the master key file PATH (WHERE names it) into a new locked *OUT. */
static int keys_read_file(const char *path, const char *where, uint8_t **out)
{
	char hex[2 * crypto_secretbox_KEYBYTES + 4];
	struct stat st;
	int ret = -1;

	int fd = open(path, O_RDONLY | O_NOFOLLOW);
	if (fd < 0) {
		log_error("keys: cannot open %s: %s", where, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		log_error("keys: %s is not a regular file", where);
		goto done;
	}
	if ((st.st_mode & 077) != 0) {
		log_error("keys: %s is readable by group or others (mode %03o); "
			  "run chmod 600 on it",
			  where, (unsigned)(st.st_mode & 0777));
		goto done;
	}
	ssize_t n = read(fd, hex, sizeof(hex));
	if (n < 0) {
		log_error("keys: cannot read %s: %s", where, strerror(errno));
		goto done;
	}
	ret = keys_decode(hex, (size_t)n, where, out);
done:
	sodium_memzero(hex, sizeof(hex));
	close(fd);
	return ret;
}

int keys_init(const char *path)
{
	const char *where;
	int ret;

	switch (keys_master_source(path, &where)) {
	case KEYS_SRC_ENV: {
		char *text = getenv(KEYS_MASTER_ENV);
		size_t n = text != NULL ? strlen(text) : 0;
		ret = keys_decode(text != NULL ? text : "", n, where, &keys.master);
		/* not left for child processes or /proc/PID/environ */
		if (text != NULL)
			sodium_memzero(text, n);
		unsetenv(KEYS_MASTER_ENV);
		return ret;
	}
	case KEYS_SRC_CREDENTIAL:
		return keys_read_file(keys_src.path, where, &keys.master);
	case KEYS_SRC_FILE:
	default:
		if (access(path, F_OK) != 0 && errno == ENOENT) {
			log_error("keys: %s does not exist (run 'idemd migrate' to create it, or "
				  "copy it from another instance: every instance must use the "
				  "same one)",
				  where);
			return -1;
		}
		return keys_read_file(path, where, &keys.master);
	}
}

/* Opens SK under MASTER into KEY; 0 or -1. */
static int keys_open(const struct sealed_key *sk, const uint8_t *master, uint8_t *key)
{
	if (sk->sk_len != crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES + TOKEN_KEY_BYTES)
		return -1;
	return crypto_secretbox_open_easy(key, sk->sk_sealed + crypto_secretbox_NONCEBYTES,
					  sk->sk_len - crypto_secretbox_NONCEBYTES, sk->sk_sealed,
					  master);
}

/* Replaces the loaded signing keys with those of the database. */
static int keys_load(void)
{
	struct sealed_key *sealed = NULL;
	size_t n = 0;
	int ret = -1;

	if (store_keys_load(&sealed, &n) < 0)
		return -1;
	struct keys_entry *entries = sodium_allocarray(n > 0 ? n : 1, sizeof(*entries));
	if (entries == NULL)
		goto done;
	for (size_t i = 0; i < n; i++) {
		const struct sealed_key *s = &sealed[i];
		entries[i].ke_id = s->sk_id;
		entries[i].ke_active = s->sk_retired_at == 0;
		if (keys.master == NULL || keys_open(s, keys.master, entries[i].ke_key) != 0) {
			log_error("keys: %s cannot open %s signing key %u: it is not the master "
				  "key the signing keys were sealed with (every instance must use "
				  "the same one)",
				  keys_src.where,
				  s->sk_retired_at == 0 ? "the active" : "the retired",
				  (unsigned)s->sk_id);
			sodium_free(entries);
			ret = KEYS_WRONG_MASTER;
			goto done;
		}
	}
	pthread_rwlock_wrlock(&keys.lock);
	if (keys.entries != NULL)
		sodium_free(keys.entries); /* sodium_free wipes */
	keys.entries = entries;
	keys.n = n;
	keys.newest = n > 0 ? entries[n - 1].ke_id : 0;
	pthread_rwlock_unlock(&keys.lock);
	ret = 0;
done:
	store_keys_free(sealed, n);
	return ret;
}

int keys_refresh(void)
{
	uint32_t newest;

	if (store_keys_newest(&newest) < 0)
		return -1;
	pthread_rwlock_rdlock(&keys.lock);
	int same = newest == keys.newest && keys.entries != NULL;
	pthread_rwlock_unlock(&keys.lock);
	if (same)
		return 0;
	int rc = keys_load();
	if (rc < 0)
		return rc;
	if (newest > 0)
		log_info("keys: %u is the active signing key", (unsigned)newest);
	return 0;
}

static int keys_add(int first_only, uint32_t *id);

int keys_rotate(uint32_t *id)
{
	/* a new key sealed under another master key than the others would
	 * lock every instance out of it */
	int rc = keys_load();
	if (rc < 0)
		return rc;
	return keys_add(0, id);
}

int keys_check(void)
{
	return keys_load();
}

#define KEYS_SEALED_BYTES \
	(crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES + TOKEN_KEY_BYTES)

/* Creates the new master key file PATH when it is missing (*CREATED set
 * then) and reads it into a new locked *FRESH (sodium_free()); 0, -1, or
 * KEYS_WRONG_MASTER (logged; *FRESH freed and NULL) when it holds the
 * current master key. */
static int keys_read_new_master(const char *path, int *created, uint8_t **fresh)
{
	char where[4200];

	snprintf(where, sizeof(where), "the new master key file %s", path);
	if (keys_master_create(path, created) < 0 || keys_read_file(path, where, fresh) < 0)
		return -1;
	if (sodium_memcmp(*fresh, keys.master, crypto_secretbox_KEYBYTES) == 0) {
		log_error("keys: %s holds the current master key", where);
		sodium_free(*fresh);
		*fresh = NULL;
		return KEYS_WRONG_MASTER;
	}
	return 0;
}

/* Opens each of the N SEALED signing keys under the current master key
 * (into KEY, a locked buffer of TOKEN_KEY_BYTES) and seals it again under
 * FRESH into OUT[i], PTRS[i] and LENS[i] pointing at it as
 * store_keys_reseal takes them; 0, or -1 (logged) at the first one the
 * current master key does not open. */
static int keys_reseal_each(const struct sealed_key *sealed, size_t n, const uint8_t *fresh,
			    uint8_t *key, unsigned char (*out)[KEYS_SEALED_BYTES],
			    const unsigned char **ptrs, size_t *lens)
{
	for (size_t i = 0; i < n; i++) {
		if (keys_open(&sealed[i], keys.master, key) != 0) {
			log_error("keys: %s cannot open signing key %u: it is not the master key "
				  "the signing keys were sealed with; nothing was changed",
				  keys_src.where, (unsigned)sealed[i].sk_id);
			return -1;
		}
		randombytes_buf(out[i], crypto_secretbox_NONCEBYTES);
		crypto_secretbox_easy(out[i] + crypto_secretbox_NONCEBYTES, key, TOKEN_KEY_BYTES,
				      out[i], fresh);
		ptrs[i] = out[i];
		lens[i] = KEYS_SEALED_BYTES;
	}
	return 0;
}

int keys_master_rotate(const char *new_path, int *created, size_t *resealed)
{
	struct sealed_key *sealed = NULL;
	unsigned char(*out)[KEYS_SEALED_BYTES] = NULL;
	const unsigned char **ptrs = NULL;
	size_t *lens = NULL, n = 0, room;
	uint8_t *fresh = NULL, *key = NULL;
	int ok = 0, ret = -1, rc;

	*created = 0;
	*resealed = 0;
	if (keys.master == NULL)
		return -1;
	rc = keys_read_new_master(new_path, created, &fresh);
	if (rc != 0)
		return rc;
	if (store_keys_load(&sealed, &n) < 0)
		goto done;
	room = n > 0 ? n : 1;
	key = sodium_malloc(TOKEN_KEY_BYTES);
	out = calloc(room, sizeof(*out));
	ptrs = calloc(room, sizeof(*ptrs));
	lens = calloc(room, sizeof(*lens));
	if (key == NULL || out == NULL || ptrs == NULL || lens == NULL)
		goto done;
	if (keys_reseal_each(sealed, n, fresh, key, out, ptrs, lens) != 0) {
		ret = KEYS_WRONG_MASTER;
		goto done;
	}
	if (store_keys_reseal(sealed, ptrs, lens, n, &ok) < 0)
		goto done;
	if (!ok) {
		log_error("keys: the signing keys changed while they were being re-sealed (a "
			  "'keys rotate' or another 'master-key rotate'); nothing was changed, "
			  "run it again");
		goto done;
	}
	*resealed = n;
	ret = 0;
done:
	if (key != NULL)
		sodium_free(key);
	if (fresh != NULL)
		sodium_free(fresh);
	free(out);
	free(ptrs);
	free(lens);
	store_keys_free(sealed, n);
	return ret;
}

int keys_create_first(uint32_t *id)
{
	return keys_add(1, id);
}

/* Seals a fresh random signing key under the master key and stores it. */
static int keys_add(int first_only, uint32_t *id)
{
	uint8_t *key = sodium_malloc(TOKEN_KEY_BYTES);
	unsigned char
		sealed[crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES + TOKEN_KEY_BYTES];
	int ret = -1;

	if (key == NULL || keys.master == NULL)
		goto done;
	randombytes_buf(key, TOKEN_KEY_BYTES);
	randombytes_buf(sealed, crypto_secretbox_NONCEBYTES);
	crypto_secretbox_easy(sealed + crypto_secretbox_NONCEBYTES, key, TOKEN_KEY_BYTES, sealed,
			      keys.master);
	if (store_key_insert(sealed, sizeof(sealed), first_only, id) < 0)
		goto done;
	/* a retired key verifies until no token it signed can still be valid */
	if (store_keys_prune(KEYS_MAX_TOKEN_TTL_SECONDS + 3600) < 0)
		goto done;
	ret = 0;
done:
	if (key != NULL)
		sodium_free(key);
	return ret;
}

int keys_ready(void)
{
	pthread_rwlock_rdlock(&keys.lock);
	int ready = keys.n > 0;
	pthread_rwlock_unlock(&keys.lock);
	return ready;
}

int keys_sign_token(struct token *t, char *out, size_t outlen)
{
	int ret = -1;

	pthread_rwlock_rdlock(&keys.lock);
	for (size_t i = keys.n; i-- > 0;) {
		if (keys.entries[i].ke_active) {
			t->key_id = keys.entries[i].ke_id;
			ret = token_encode(t, keys.entries[i].ke_key, out, outlen);
			break;
		}
	}
	pthread_rwlock_unlock(&keys.lock);
	return ret;
}

/* The signing key with id KEY_ID, or NULL; called with keys.lock held. */
static const uint8_t *keys_by_id(uint32_t key_id, void *arg)
{
	(void)arg;
	for (size_t i = 0; i < keys.n; i++)
		if (keys.entries[i].ke_id == key_id)
			return keys.entries[i].ke_key;
	return NULL;
}

int keys_verify_token(const char *s, size_t len, struct token *t)
{
	pthread_rwlock_rdlock(&keys.lock);
	int rc = token_open(s, len, t, keys_by_id, NULL);
	pthread_rwlock_unlock(&keys.lock);
	return rc;
}

void keys_shutdown(void)
{
	pthread_rwlock_wrlock(&keys.lock);
	if (keys.entries != NULL)
		sodium_free(keys.entries);
	if (keys.master != NULL)
		sodium_free(keys.master);
	keys.entries = NULL;
	keys.master = NULL;
	keys.n = 0;
	keys.newest = 0;
	pthread_rwlock_unlock(&keys.lock);
}
