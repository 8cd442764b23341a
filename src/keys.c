/* Keys. The master key (32 bytes, hex in a 0600 file) seals signing keys
 * with crypto_secretbox; signing keys live in sodium_malloc'd (locked,
 * guarded) memory and are wiped on reload and shutdown. */
#include "keys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
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
	uint8_t *master;            /* sodium_malloc, crypto_secretbox_KEYBYTES */
	struct keys_entry *entries; /* sodium_malloc */
	size_t n;
	uint32_t newest;
} keys = { PTHREAD_RWLOCK_INITIALIZER, NULL, NULL, 0, 0 };

int keys_master_create(const char *path, int *created)
{
	uint8_t raw[crypto_secretbox_KEYBYTES];
	char hex[2 * sizeof(raw) + 2];

	*created = 0;
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0) {
		if (errno == EEXIST)
			return 0;
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
	if (w != (ssize_t)n || fsync(fd) != 0 || close(fd) != 0) {
		log_error("keys: cannot write master key file %s", path);
		unlink(path);
		return -1;
	}
	*created = 1;
	return 0;
}

int keys_init(const char *path)
{
	char hex[2 * crypto_secretbox_KEYBYTES + 2];
	struct stat st;
	int ret = -1;

	int fd = open(path, O_RDONLY | O_NOFOLLOW);
	if (fd < 0) {
		log_error("keys: cannot open master key file %s: %s (run 'idemd migrate' to create it)",
			  path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		log_error("keys: master key file %s is not a regular file", path);
		goto done;
	}
	if ((st.st_mode & 077) != 0) {
		log_error("keys: master key file %s is readable by group or others (mode %03o); "
			  "run chmod 600 on it", path, (unsigned)(st.st_mode & 0777));
		goto done;
	}
	ssize_t n = read(fd, hex, sizeof(hex));
	if (n < 2 * crypto_secretbox_KEYBYTES) {
		log_error("keys: master key file %s is too short", path);
		goto done;
	}
	keys.master = sodium_malloc(crypto_secretbox_KEYBYTES);
	size_t bin_len = 0;
	if (keys.master == NULL ||
	    sodium_hex2bin(keys.master, crypto_secretbox_KEYBYTES, hex, (size_t)n, "\n", &bin_len,
			   NULL) != 0 ||
	    bin_len != crypto_secretbox_KEYBYTES) {
		log_error("keys: master key file %s must hold %d hex characters", path,
			  2 * crypto_secretbox_KEYBYTES);
		sodium_free(keys.master);
		keys.master = NULL;
		goto done;
	}
	sodium_mprotect_readonly(keys.master);
	ret = 0;
done:
	sodium_memzero(hex, sizeof(hex));
	close(fd);
	return ret;
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
		if (s->sk_len != crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES +
				 TOKEN_KEY_BYTES ||
		    crypto_secretbox_open_easy(entries[i].ke_key,
					       s->sk_sealed + crypto_secretbox_NONCEBYTES,
					       s->sk_len - crypto_secretbox_NONCEBYTES,
					       s->sk_sealed, keys.master) != 0) {
			log_error("keys: signing key %u cannot be opened with this master key",
				  (unsigned)s->sk_id);
			sodium_free(entries);
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
	if (keys_load() < 0)
		return -1;
	if (newest > 0)
		log_info("keys: %u is the active signing key", (unsigned)newest);
	return 0;
}

static int keys_add(int first_only, uint32_t *id);

int keys_rotate(uint32_t *id)
{
	return keys_add(0, id);
}

int keys_create_first(uint32_t *id)
{
	return keys_add(1, id);
}

/* Seals a fresh random signing key under the master key and stores it. */
static int keys_add(int first_only, uint32_t *id)
{
	uint8_t *key = sodium_malloc(TOKEN_KEY_BYTES);
	unsigned char sealed[crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES +
			     TOKEN_KEY_BYTES];
	int ret = -1;

	if (key == NULL || keys.master == NULL)
		goto done;
	randombytes_buf(key, TOKEN_KEY_BYTES);
	randombytes_buf(sealed, crypto_secretbox_NONCEBYTES);
	crypto_secretbox_easy(sealed + crypto_secretbox_NONCEBYTES, key, TOKEN_KEY_BYTES,
			      sealed, keys.master);
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
