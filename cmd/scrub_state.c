/* SPDX-License-Identifier: MIT */
/*
 * The scrub's state between runs, in the format of btrfs-progs'
 * scrub.status files ("scrub status:1", then per device
 * "FSID:DEVID|name:value|name:value..."), with ubtrfs's own fields added
 * (parity, generation errors, the pid, the device path): a line is read by
 * its names, so an unknown name is skipped and a missing one is 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "scrub.h"

const char *scrub_state_dir(void)
{
	const char *d = getenv("UBTRFS_STATE_DIR");

	return d && *d ? d : "/var/lib/ubtrfs";
}

void scrub_state_path(const uint8_t fsid[16], const char *suffix, char *out, size_t len)
{
	char u[37];

	uuid_unparse_lower(fsid, u);
	snprintf(out, len, "%s/scrub.%s.%s", scrub_state_dir(), suffix, u);
}

/* the numeric fields, by name */
#define P(f) { #f, offsetof(struct ub_scrub_dev_progress, f) }
static const struct {
	const char *name;
	size_t off;
} fields[] = {
	P(data_extents_scrubbed), P(tree_extents_scrubbed), P(data_bytes_scrubbed), P(tree_bytes_scrubbed),
	P(read_errors), P(csum_errors), P(verify_errors), P(no_csum), P(super_errors), P(malloc_errors),
	P(uncorrectable_errors), P(corrected_errors), P(last_physical), P(unverified_errors),
	P(generation_errors), P(parity_rows_checked), P(parity_errors), P(parity_fixed), P(bytes_to_scrub),
};
#undef P
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static void parse_line(char *line, struct scrub_rec *r)
{
	char *save = NULL;

	for (char *tok = strtok_r(line, "|", &save); tok; tok = strtok_r(NULL, "|", &save)) {
		char *colon = strchr(tok, ':');
		unsigned long long v;

		if (!colon)
			continue;
		*colon = '\0';
		if (!strcmp(tok, "path")) {
			snprintf(r->path, sizeof(r->path), "%s", colon + 1);
			continue;
		}
		v = strtoull(colon + 1, NULL, 10);
		for (size_t i = 0; i < NFIELDS; i++)
			if (!strcmp(tok, fields[i].name))
				*(uint64_t *)((char *)&r->p + fields[i].off) = v;
		if (!strcmp(tok, "t_start"))
			r->t_start = (int64_t)v;
		else if (!strcmp(tok, "t_resumed"))
			r->t_resumed = (int64_t)v;
		else if (!strcmp(tok, "duration"))
			r->duration = v;
		else if (!strcmp(tok, "canceled"))
			r->p.canceled = v != 0;
		else if (!strcmp(tok, "finished"))
			r->p.finished = v != 0;
		else if (!strcmp(tok, "pid"))
			r->pid = (pid_t)v;
		else if (!strcmp(tok, "readonly"))
			r->readonly = v != 0;
	}
}

int scrub_state_load(const uint8_t fsid[16], struct scrub_rec **out, int *n)
{
	char path[4200], u[37], *line = NULL;
	size_t cap = 0;
	struct scrub_rec *v = NULL;
	int cnt = 0;
	FILE *f;

	*out = NULL;
	*n = 0;
	scrub_state_path(fsid, "status", path, sizeof(path));
	uuid_unparse_lower(fsid, u);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	flock(fileno(f), LOCK_SH);
	while (getline(&line, &cap, f) > 0) {
		char *bar = strchr(line, '|'), *colon;
		struct scrub_rec *nv;

		line[strcspn(line, "\n")] = '\0';
		colon = bar ? memchr(line, ':', (size_t)(bar - line)) : NULL;
		if (!bar || !colon || (size_t)(colon - line) != strlen(u) || strncasecmp(line, u, strlen(u)))
			continue;
		nv = realloc(v, (size_t)(cnt + 1) * sizeof(*v));
		if (!nv) {
			free(v);
			free(line);
			fclose(f);
			return -ENOMEM;
		}
		v = nv;
		memset(&v[cnt], 0, sizeof(v[cnt]));
		v[cnt].devid = strtoull(colon + 1, NULL, 10);
		v[cnt].p.devid = v[cnt].devid;
		parse_line(bar + 1, &v[cnt]);
		cnt++;
	}
	free(line);
	fclose(f);
	*out = v;
	*n = cnt;
	return cnt ? 0 : -ENOENT;
}

int scrub_state_save(const uint8_t fsid[16], const struct scrub_rec *r, int n)
{
	char path[4200], tmp[4300], u[37];
	FILE *f;
	int fd;

	if (mkdir(scrub_state_dir(), 0755) && errno != EEXIST) {
		int e = errno;

		fprintf(stderr, "ubtrfs scrub: error: cannot make %s: %s\n", scrub_state_dir(), strerror(e));
		return -e;
	}
	scrub_state_path(fsid, "status", path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
	uuid_unparse_lower(fsid, u);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		fprintf(stderr, "ubtrfs scrub: error: cannot write %s: %s\n", tmp, strerror(e));
		return -e;
	}
	fprintf(f, "scrub status:1\n");
	for (int i = 0; i < n; i++) {
		fprintf(f, "%s:%" PRIu64, u, r[i].devid);
		for (size_t k = 0; k < NFIELDS; k++)
			fprintf(f, "|%s:%" PRIu64, fields[k].name, *(const uint64_t *)((const char *)&r[i].p + fields[k].off));
		fprintf(f, "|csum_discards:0|t_start:%" PRId64 "|t_resumed:%" PRId64 "|duration:%" PRIu64
			   "|canceled:%d|finished:%d|pid:%ld|readonly:%d|path:%s\n",
			r[i].t_start, r[i].t_resumed, r[i].duration, r[i].p.canceled, r[i].p.finished, (long)r[i].pid,
			r[i].readonly, r[i].path);
	}
	if (fflush(f) || fsync(fileno(f)) || fclose(f)) {
		int e = errno;

		unlink(tmp);
		fprintf(stderr, "ubtrfs scrub: error: cannot write %s: %s\n", tmp, strerror(e));
		return -e;
	}
	if (rename(tmp, path)) {
		int e = errno;

		unlink(tmp);
		fprintf(stderr, "ubtrfs scrub: error: cannot write %s: %s\n", path, strerror(e));
		return -e;
	}
	return 0;
}

bool scrub_pid_alive(pid_t pid)
{
	char path[64], buf[256];
	ssize_t len;
	int fd;

	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%ld/cmdline", (long)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return false;
	buf[len] = '\0';
	/* argv[0] is ubtrfs (any path, any name containing it: the tests run a copy) */
	return strstr(buf, "ubtrfs") != NULL;
}
