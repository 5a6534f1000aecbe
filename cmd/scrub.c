/* SPDX-License-Identifier: MIT */
/*
 * ubtrfs scrub start|resume|status|cancel: every copy of every allocated
 * block verified (include/ubtrfs/scrub.h, docs/scrub.md), on devices nothing
 * has mounted, or on a mount (the kernel's btrfs or a ubtrfs mount) through
 * btrfs's scrub ioctls. Each problem is one line on stdout, the summary
 * follows; the state of every run is kept (scrub_state.c) for status and
 * resume.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "cmd.h"
#include "fs_target.h"
#include "json.h"
#include "scrub.h"
#include "ubtrfs_ioctl.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/engine.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/rescue.h"
#include "ubtrfs/scrub.h"

static const char help[] =
	"usage: ubtrfs scrub start [OPTIONS] DEV...|MOUNTPOINT\n"
	"       ubtrfs scrub resume [OPTIONS] DEV...|MOUNTPOINT\n"
	"       ubtrfs scrub status [-d] [--json] DEV...|MOUNTPOINT\n"
	"       ubtrfs scrub cancel DEV...|MOUNTPOINT\n\n"
	"Read every copy of every allocated tree block and data sector on every device\n"
	"present and verify it: tree blocks against their checksum and header, data against\n"
	"the checksum tree, data without checksums against its other copies, and on RAID5/6\n"
	"the P and Q of every row that holds live data. A bad copy is rewritten in place from\n"
	"a copy (or a parity rebuild) its checksum proves good, a bad P or Q recomputed from\n"
	"proven data; where nothing good is certain nothing is written. Each problem is one\n"
	"line on stdout (device, devid, physical and logical address, what was wrong, what\n"
	"became of it, and for data the files that own it), then a summary per device\n"
	"(docs/scrub.md). DEV... are devices nothing has mounted (a mounted one is refused);\n"
	"a MOUNTPOINT is scrubbed by its filesystem (the kernel's btrfs, or a ubtrfs mount's\n"
	"daemon) while it serves reads and writes. The devices' error counters are updated\n"
	"as the kernel keeps them (ubtrfs device stats).\n\n"
	"start, resume:\n"
	"  -B                 stay in the foreground and print the summary (without it the\n"
	"                     scrub runs in the background; see 'scrub status')\n"
	"  -r                 read-only: report, repair nothing\n"
	"  -d                 print the counts of each device (always with several devices)\n"
	"      --limit RATE   read each device at most RATE bytes per second (K, M, G, T\n"
	"                     suffixes, 1024-based); 0 is no limit\n"
	"      --json         one JSON object per problem, then one {\"summary\": ...} object\n"
	"  -f, --force        start even if the state says a scrub is running, or a mount holds\n"
	"                     one of the devices\n"
	"status:\n"
	"  -d                 each device's counts\n"
	"      --json         the state as one JSON object\n"
	"  -h, --help         this text\n"
	OPEN_ARGS_HELP
	"\nThe state of each scrub is kept in $UBTRFS_STATE_DIR (default /var/lib/ubtrfs),\n"
	"scrub.status.FSID, as btrfs-progs keeps /var/lib/btrfs; 'resume' goes on from where\n"
	"a cancelled or interrupted scrub stopped.\n"
	"Exit codes: 0 nothing wrong found, 1 problems found (repaired or not), 2 usage or\n"
	"fatal error (the filesystem could not be opened, nothing to resume or cancel).\n";

struct sargs {
	bool foreground, readonly, per_dev, json, force, quiet;
	uint64_t limit;
	struct open_args oa;
};

/* ---- output ---- */

struct out {
	FILE *f;
	bool json, tty;
	pthread_mutex_t lock;
	bool progress_shown;
	unsigned long long problems;
};

static void clear_progress(struct out *o)
{
	if (o->progress_shown) {
		fputs("\r\033[K", stderr);
		o->progress_shown = false;
	}
}

void scrub_format_problem(FILE *f, const struct ub_scrub_problem *p, bool json)
{
	if (json) {
		fprintf(f, "{\"kind\":\"%s\",\"outcome\":\"%s\",\"metadata\":%s,\"devid\":%" PRIu64 ",\"device\":",
			ub_scrub_kind_name(p->kind), ub_scrub_outcome_name(p->outcome), p->metadata ? "true" : "false",
			p->devid);
		if (p->dev_path)
			json_str(f, p->dev_path, strlen(p->dev_path));
		else
			fputs("null", f);
		fprintf(f, ",\"physical\":%" PRIu64 ",\"logical\":%" PRIu64 ",\"length\":%" PRIu64 ",\"mirror\":%d",
			p->physical, p->logical, p->length, p->mirror);
		if (p->kind == UB_SCRUB_PARITY)
			fprintf(f, ",\"parity\":\"%s\"", p->parity ? "Q" : "P");
		if (p->metadata)
			fprintf(f, ",\"tree\":%" PRIu64 ",\"level\":%d", p->tree, p->level);
		fputs(",\"detail\":", f);
		json_str(f, p->detail ? p->detail : "", p->detail ? strlen(p->detail) : 0);
		fputs(",\"files\":[", f);
		for (int i = 0; i < p->nowners; i++) {
			const struct ub_scrub_owner *w = &p->owners[i];

			fprintf(f, "%s{\"subvol\":%" PRIu64 ",\"ino\":%" PRIu64 ",\"path\":", i ? "," : "", w->subvol, w->ino);
			if (w->path)
				json_str(f, w->path, strlen(w->path));
			else
				fputs("null", f);
			fprintf(f, ",\"offset\":%" PRIu64 ",\"length\":%" PRIu64 ",\"compressed\":%s}", w->offset, w->length,
				w->compressed ? "true" : "false");
		}
		fprintf(f, "],\"more_files\":%s}\n", p->more_owners ? "true" : "false");
		return;
	}
	fprintf(f, "%s: devid %" PRIu64 " (%s) physical %" PRIu64, ub_scrub_kind_name(p->kind), p->devid,
		p->dev_path ? p->dev_path : "missing", p->physical);
	if (p->logical)
		fprintf(f, " logical %" PRIu64, p->logical);
	fprintf(f, " length %" PRIu64, p->length);
	if (p->kind == UB_SCRUB_PARITY)
		fprintf(f, " %s", p->parity ? "Q" : "P");
	else if (p->kind == UB_SCRUB_SUPER)
		fputs(" superblock", f);
	else if (p->metadata)
		fprintf(f, " tree block (tree %" PRIu64 " level %d) copy %d", p->tree, p->level, p->mirror);
	else
		fprintf(f, " data copy %d", p->mirror);
	fprintf(f, ": %s: %s", p->detail ? p->detail : "", ub_scrub_outcome_name(p->outcome));
	for (int i = 0; i < p->nowners; i++) {
		const struct ub_scrub_owner *w = &p->owners[i];
		char esc[4096 * 4 + 1];

		fprintf(f, "%s subvol %" PRIu64 " ", i ? "," : "; files:", w->subvol);
		if (w->path) {
			ub_name_escape(w->path, strlen(w->path), esc, sizeof(esc));
			fputs(esc, f);
		} else {
			fprintf(f, "(inode %" PRIu64 ")", w->ino);
		}
		fprintf(f, " offset %" PRIu64, w->offset);
		if (w->compressed)
			fprintf(f, " (compressed, %" PRIu64 " bytes)", w->length);
	}
	if (p->more_owners)
		fputs(" and more", f);
	fputc('\n', f);
}

static void on_problem(void *arg, const struct ub_scrub_problem *p)
{
	struct out *o = arg;

	pthread_mutex_lock(&o->lock);
	clear_progress(o);
	scrub_format_problem(o->f, p, o->json);
	fflush(o->f);
	o->problems++;
	pthread_mutex_unlock(&o->lock);
}

/* The counters of struct ub_scrub_dev_progress in UBTRFS_IOC_SCRUB_COUNTS's order (never reordered). */
#define C(f) offsetof(struct ub_scrub_dev_progress, f)
static const size_t count_fields[] = {
	C(bytes_to_scrub), C(last_physical), C(data_extents_scrubbed), C(tree_extents_scrubbed),
	C(data_bytes_scrubbed), C(tree_bytes_scrubbed), C(read_errors), C(csum_errors), C(verify_errors),
	C(super_errors), C(no_csum), C(generation_errors), C(corrected_errors), C(uncorrectable_errors),
	C(unverified_errors), C(parity_rows_checked), C(parity_errors), C(parity_fixed), C(malloc_errors),
};
#undef C
#define NCOUNTS (int)(sizeof(count_fields) / sizeof(count_fields[0]))

void scrub_counts_pack(const struct ub_scrub_dev_progress *p, uint64_t *v, int n)
{
	for (int i = 0; i < n; i++)
		v[i] = i < NCOUNTS ? *(const uint64_t *)((const char *)p + count_fields[i]) : 0;
}

void scrub_counts_unpack(const uint64_t *v, int n, struct ub_scrub_dev_progress *p)
{
	for (int i = 0; i < n && i < NCOUNTS; i++)
		*(uint64_t *)((char *)p + count_fields[i]) = v[i];
}

static void from_btrfs(const struct btrfs_scrub_progress *b, struct ub_scrub_dev_progress *p)
{
	memset(p, 0, sizeof(*p));
	p->data_extents_scrubbed = b->data_extents_scrubbed;
	p->tree_extents_scrubbed = b->tree_extents_scrubbed;
	p->data_bytes_scrubbed = b->data_bytes_scrubbed;
	p->tree_bytes_scrubbed = b->tree_bytes_scrubbed;
	p->read_errors = b->read_errors;
	p->csum_errors = b->csum_errors;
	p->verify_errors = b->verify_errors;
	p->no_csum = b->no_csum;
	p->super_errors = b->super_errors;
	p->malloc_errors = b->malloc_errors;
	p->uncorrectable_errors = b->uncorrectable_errors;
	p->corrected_errors = b->corrected_errors;
	p->last_physical = b->last_physical;
	p->unverified_errors = b->unverified_errors;
}

static void duration_str(uint64_t sec, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRIu64 ":%02" PRIu64 ":%02" PRIu64, sec / 3600, sec / 60 % 60, sec % 60);
}

static void sum_progress(struct ub_scrub_dev_progress *t, const struct ub_scrub_dev_progress *a)
{
	t->data_extents_scrubbed += a->data_extents_scrubbed;
	t->tree_extents_scrubbed += a->tree_extents_scrubbed;
	t->data_bytes_scrubbed += a->data_bytes_scrubbed;
	t->tree_bytes_scrubbed += a->tree_bytes_scrubbed;
	t->read_errors += a->read_errors;
	t->csum_errors += a->csum_errors;
	t->verify_errors += a->verify_errors;
	t->super_errors += a->super_errors;
	t->no_csum += a->no_csum;
	t->generation_errors += a->generation_errors;
	t->corrected_errors += a->corrected_errors;
	t->uncorrectable_errors += a->uncorrectable_errors;
	t->unverified_errors += a->unverified_errors;
	t->parity_rows_checked += a->parity_rows_checked;
	t->parity_errors += a->parity_errors;
	t->parity_fixed += a->parity_fixed;
	t->malloc_errors += a->malloc_errors;
	t->bytes_to_scrub += a->bytes_to_scrub;
}

static bool any_error(const struct ub_scrub_dev_progress *p)
{
	return p->read_errors || p->csum_errors || p->verify_errors || p->super_errors || p->parity_errors ||
	       p->unverified_errors || p->malloc_errors;
}

/* The error lines of btrfs-progs' summary, and ubtrfs's parity line. */
static void print_errors(FILE *f, const struct ub_scrub_dev_progress *p, const char *indent)
{
	if (!any_error(p)) {
		fprintf(f, "%sError summary:    no errors found\n", indent);
	} else {
		fprintf(f, "%sError summary:   ", indent);
		if (p->read_errors)
			fprintf(f, " read=%" PRIu64, p->read_errors);
		if (p->super_errors)
			fprintf(f, " super=%" PRIu64, p->super_errors);
		if (p->verify_errors)
			fprintf(f, " verify=%" PRIu64, p->verify_errors);
		if (p->csum_errors)
			fprintf(f, " csum=%" PRIu64, p->csum_errors);
		if (p->parity_errors)
			fprintf(f, " parity=%" PRIu64, p->parity_errors);
		if (p->unverified_errors)
			fprintf(f, " differ=%" PRIu64, p->unverified_errors);
		fputc('\n', f);
		fprintf(f, "%s  Corrected:      %" PRIu64 "\n", indent, p->corrected_errors);
		fprintf(f, "%s  Uncorrectable:  %" PRIu64 "\n", indent, p->uncorrectable_errors);
		fprintf(f, "%s  Unverified:     %" PRIu64 "\n", indent, p->unverified_errors);
	}
	if (p->parity_rows_checked || p->parity_errors)
		fprintf(f, "%sParity rows:      %" PRIu64 " checked, %" PRIu64 " bad, %" PRIu64 " recomputed\n", indent,
			p->parity_rows_checked, p->parity_errors, p->parity_fixed);
}

static void print_dev(FILE *f, const struct scrub_rec *r)
{
	const struct ub_scrub_dev_progress *p = &r->p;
	const struct units u = { UNITS_HUMAN, false };
	char a[32], b[32], c[32];

	fprintf(f, "Device %s (id %" PRIu64 "): %s\n", r->path[0] ? r->path : "?", r->devid,
		p->finished ? "done" : p->canceled ? "canceled" : p->running ? "running" : "interrupted");
	fprintf(f, "    Scrubbed:         %s of %s allocated (%" PRIu64 " tree blocks, %s of data, %" PRIu64
		   " sectors without checksums)\n",
		pretty_size(p->data_bytes_scrubbed + p->tree_bytes_scrubbed, &u, a, sizeof(a)),
		pretty_size(p->bytes_to_scrub, &u, b, sizeof(b)), p->tree_extents_scrubbed,
		pretty_size(p->data_bytes_scrubbed, &u, c, sizeof(c)), p->no_csum);
	fprintf(f, "    Last physical:    %" PRIu64 "\n", p->last_physical);
	print_errors(f, p, "    ");
}

static const char *status_word(const struct scrub_rec *r, int n)
{
	bool running = false, canceled = false, finished = true;

	for (int i = 0; i < n; i++) {
		running |= r[i].pid && !r[i].p.finished && scrub_pid_alive(r[i].pid);
		canceled |= r[i].p.canceled;
		finished &= r[i].p.finished;
	}
	return running ? "running" : finished ? "finished" : canceled ? "aborted" : "interrupted";
}

static void print_summary(FILE *f, const uint8_t fsid[16], const struct scrub_rec *r, int n, bool per_dev,
			  bool done_line)
{
	struct ub_scrub_dev_progress t = { 0 };
	const struct units u = { UNITS_HUMAN, false };
	char fs[37], a[32], b[32], date[64];
	uint64_t dur = 0;
	int64_t start = 0;
	struct tm tm;
	time_t ts;

	uuid_unparse_lower(fsid, fs);
	for (int i = 0; i < n; i++) {
		sum_progress(&t, &r[i].p);
		if (r[i].duration > dur)
			dur = r[i].duration;
		if (!start || (r[i].t_start && r[i].t_start < start))
			start = r[i].t_start;
	}
	ts = (time_t)start;
	localtime_r(&ts, &tm);
	strftime(date, sizeof(date), "%a %b %e %H:%M:%S %Y", &tm);
	if (done_line)
		fprintf(f, "scrub done for %s\n", fs);
	else
		fprintf(f, "UUID:             %s\n", fs);
	fprintf(f, "Scrub started:    %s\n", date);
	fprintf(f, "Status:           %s\n", status_word(r, n));
	duration_str(dur, a, sizeof(a));
	fprintf(f, "Duration:         %s\n", a);
	fprintf(f, "Total to scrub:   %s\n", pretty_size(t.bytes_to_scrub, &u, a, sizeof(a)));
	fprintf(f, "Bytes scrubbed:   %s\n", pretty_size(t.data_bytes_scrubbed + t.tree_bytes_scrubbed, &u, b, sizeof(b)));
	fprintf(f, "Rate:             %s/s\n",
		pretty_size(dur ? (t.data_bytes_scrubbed + t.tree_bytes_scrubbed) / dur : 0, &u, a, sizeof(a)));
	print_errors(f, &t, "");
	if (per_dev || n > 1)
		for (int i = 0; i < n; i++)
			print_dev(f, &r[i]);
}

static void print_summary_json(FILE *f, const uint8_t fsid[16], const struct scrub_rec *r, int n, bool wrapped)
{
	char fs[37];

	uuid_unparse_lower(fsid, fs);
	fprintf(f, "%s{\"fsid\":\"%s\",\"status\":\"%s\",\"devices\":[", wrapped ? "{\"summary\":" : "", fs,
		status_word(r, n));
	for (int i = 0; i < n; i++) {
		const struct ub_scrub_dev_progress *p = &r[i].p;

		fprintf(f, "%s{\"devid\":%" PRIu64 ",\"path\":", i ? "," : "", r[i].devid);
		json_str(f, r[i].path, strlen(r[i].path));
		fprintf(f,
			",\"finished\":%s,\"canceled\":%s,\"bytes_to_scrub\":%" PRIu64 ",\"last_physical\":%" PRIu64
			",\"data_extents_scrubbed\":%" PRIu64 ",\"tree_extents_scrubbed\":%" PRIu64
			",\"data_bytes_scrubbed\":%" PRIu64 ",\"tree_bytes_scrubbed\":%" PRIu64 ",\"read_errors\":%" PRIu64
			",\"csum_errors\":%" PRIu64 ",\"verify_errors\":%" PRIu64 ",\"super_errors\":%" PRIu64
			",\"no_csum\":%" PRIu64 ",\"generation_errors\":%" PRIu64 ",\"corrected_errors\":%" PRIu64
			",\"uncorrectable_errors\":%" PRIu64 ",\"unverified_errors\":%" PRIu64
			",\"parity_rows_checked\":%" PRIu64 ",\"parity_errors\":%" PRIu64 ",\"parity_fixed\":%" PRIu64
			",\"duration\":%" PRIu64 "}",
			p->finished ? "true" : "false", p->canceled ? "true" : "false", p->bytes_to_scrub, p->last_physical,
			p->data_extents_scrubbed, p->tree_extents_scrubbed, p->data_bytes_scrubbed, p->tree_bytes_scrubbed,
			p->read_errors, p->csum_errors, p->verify_errors, p->super_errors, p->no_csum, p->generation_errors,
			p->corrected_errors, p->uncorrectable_errors, p->unverified_errors, p->parity_rows_checked,
			p->parity_errors, p->parity_fixed, r[i].duration);
	}
	fprintf(f, "]}%s\n", wrapped ? "}" : "");
}

/* ---- options ---- */

static int parse_rate(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': mult = 1ULL << 10; end++; break;
	case 'm': case 'M': mult = 1ULL << 20; end++; break;
	case 'g': case 'G': mult = 1ULL << 30; end++; break;
	case 't': case 'T': mult = 1ULL << 40; end++; break;
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	else if (*end == 'B')
		end++;
	if (*end || (v && mult > UINT64_MAX / v))
		return -EINVAL;
	*out = v * mult;
	return 0;
}

static int parse_args(int argc, char **argv, const char *sub, struct sargs *a, int *first)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "limit", required_argument, NULL, 0x500 },
		{ "json", no_argument, NULL, 0x501 },
		{ "force", no_argument, NULL, 'f' },
		OPEN_ARGS_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	memset(a, 0, sizeof(*a));
	open_args_init(&a->oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "Brdfhvq", longopts, NULL)) != -1) {
		int r = open_args_parse(&a->oa, opt, optarg);

		if (r < 0)
			return usage_error("scrub", "invalid value '%s'", optarg);
		if (r > 0) {
			if (opt == 'q')
				a->quiet = true;
			continue;
		}
		switch (opt) {
		case 'h':
			fputs(help, stdout);
			return -1;
		case 'B': a->foreground = true; break;
		case 'r': a->readonly = true; break;
		case 'd': a->per_dev = true; break;
		case 'f': a->force = true; break;
		case 0x501: a->json = true; break;
		case 0x500:
			if (parse_rate(optarg, &a->limit))
				return usage_error("scrub", "invalid rate '%s'", optarg);
			break;
		default:
			return usage_error("scrub", "unknown option");
		}
	}
	if (optind >= argc)
		return usage_error("scrub", "%s needs a device or a mount point", sub);
	*first = optind;
	return 0;
}

/* ---- devices nothing may have mounted ---- */

/* Every device of the filesystem, refused when the kernel or a ubtrfs mount holds it: 0 or -EBUSY (said). */
int scrub_refuse_mounted(struct ub_fs *fs, const char *sub)
{
	struct ub_device_info *devs = NULL;
	char why[512];
	int n = 0, ret = ub_volume_list_devices(ub_fs_volume(fs), &devs, &n);

	for (int i = 0; !ret && i < n; i++) {
		const char *path = devs[i].path;

		if (!path)
			continue;
		if (ub_rescue_check_unmounted(&path, 1, why, sizeof(why)) == -EBUSY) {
			fprintf(stderr, "ubtrfs %s: error: %s: give its mount point instead\n", sub, why);
			ret = -EBUSY;
		}
	}
	free(devs);
	return ret;
}

/* ---- offline: the scrub itself ---- */

struct run {
	struct ub_scrub *s;          /* offline: the library's scrub */
	struct target *t;            /* online: the mount the ioctls go to */
	struct ub_scrub_dev_progress *fin; /* online: each device's counts when its ioctl returned */
	bool *ended;
	struct out *o;
	struct sargs *a;
	uint8_t fsid[16];
	struct scrub_rec *recs;      /* one per device scrubbed, in the scrub's order */
	int n;
	struct scrub_rec *others;    /* the state's records of devices not scrubbed this time (finished ones) */
	int nothers;
	int64_t t_run;               /* when this run started */
	uint64_t prior[64];          /* duration before this run, per record */
	struct ub_scrub_dev_progress base[64]; /* a resumed device's counts before this run */
	atomic_bool done;
};

static atomic_bool g_cancel;
static struct ub_scrub *volatile g_scrub;

static void on_signal(int sig)
{
	(void)sig;
	atomic_store(&g_cancel, true);
	if (g_scrub)
		ub_scrub_cancel(g_scrub);
}

static int online_progress(struct run *r, int i, struct ub_scrub_dev_progress *out);

/* Device i's counts now: the library's, or the mount's. */
static int run_progress(struct run *r, int i, struct ub_scrub_dev_progress *out)
{
	return r->t ? online_progress(r, i, out) : ub_scrub_progress(r->s, r->recs[i].devid, out);
}

/* the records from the scrub's counts, and the file from the records */
static void snapshot(struct run *r, bool final)
{
	int64_t now = (int64_t)time(NULL);
	struct scrub_rec *all;

	for (int i = 0; i < r->n; i++) {
		struct ub_scrub_dev_progress p;

		if (run_progress(r, i, &p))
			continue;
		if (i < 64) {
			/* a resumed scrub's counts go on from the interrupted run's, as btrfs-progs adds them */
			uint64_t total = p.bytes_to_scrub;

			sum_progress(&p, &r->base[i]);
			p.bytes_to_scrub = total;
		}
		r->recs[i].p = p;
		r->recs[i].duration = (i < 64 ? r->prior[i] : 0) + (uint64_t)(now - r->t_run);
		if (final)
			r->recs[i].pid = 0;
	}
	all = calloc((size_t)(r->n + r->nothers) + 1, sizeof(*all));
	if (!all)
		return;
	memcpy(all, r->recs, (size_t)r->n * sizeof(*all));
	if (r->nothers)
		memcpy(all + r->n, r->others, (size_t)r->nothers * sizeof(*all));
	scrub_state_save(r->fsid, all, r->n + r->nothers);
	free(all);
}

static void show_progress(struct run *r)
{
	const struct units u = { UNITS_HUMAN, false };
	uint64_t done = 0, total = 0, bytes = 0;
	char a[32], b[32];
	double secs = (double)((int64_t)time(NULL) - r->t_run);

	for (int i = 0; i < r->n; i++) {
		struct ub_scrub_dev_progress p;

		if (run_progress(r, i, &p))
			continue;
		bytes += p.data_bytes_scrubbed + p.tree_bytes_scrubbed;
		total += p.bytes_to_scrub;
		done += p.finished ? p.bytes_to_scrub : 0;
	}
	pthread_mutex_lock(&r->o->lock);
	fprintf(stderr, "\r\033[Kscrub: %s verified of %s allocated, %s/s", pretty_size(bytes, &u, a, sizeof(a)),
		pretty_size(total, &u, b, sizeof(b)), pretty_size(secs > 0 ? (uint64_t)((double)bytes / secs) : 0, &u, a, sizeof(a)));
	r->o->progress_shown = true;
	pthread_mutex_unlock(&r->o->lock);
	(void)done;
}

static void *progress_main(void *arg)
{
	struct run *r = arg;
	unsigned tick = 0;

	while (!atomic_load(&r->done)) {
		struct timespec ts = { 0, 200 * 1000 * 1000 };

		nanosleep(&ts, NULL);
		if (atomic_load(&r->done))
			break;
		tick++;
		if (r->o->tty && tick % 5 == 0)
			show_progress(r);
		if (tick % 5 == 0)
			snapshot(r, false);
	}
	return NULL;
}

/* Which devices and from where: all from 0, or (resume) the unfinished ones from where they stopped. */
static int plan(struct ub_fs *fs, const uint8_t fsid[16], bool resume, bool force, struct run *r, uint64_t **devids,
		uint64_t **start, int *ndev, const char *shown)
{
	struct ub_device_info *devs = NULL;
	struct scrub_rec *old = NULL;
	int n = 0, nold = 0, ret;
	char fs_s[37];

	uuid_unparse_lower(fsid, fs_s);
	ret = ub_volume_list_devices(ub_fs_volume(fs), &devs, &n);
	if (ret)
		return ret;
	*devids = calloc((size_t)n + 1, sizeof(**devids));
	*start = calloc((size_t)n + 1, sizeof(**start));
	r->recs = calloc((size_t)n + 1, sizeof(*r->recs));
	if (!*devids || !*start || !r->recs) {
		free(devs);
		return -ENOMEM;
	}
	scrub_state_load(fsid, &old, &nold);
	for (int i = 0; i < nold && !force; i++)
		if (old[i].pid && !old[i].p.finished && scrub_pid_alive(old[i].pid) && old[i].pid != getpid()) {
			fprintf(stderr, "ubtrfs scrub: error: a scrub of %s is running (pid %ld); 'ubtrfs scrub cancel' "
				"stops it\n", fs_s, (long)old[i].pid);
			free(old);
			free(devs);
			return -EINPROGRESS;
		}
	*ndev = 0;
	for (int i = 0; i < n; i++) {
		const struct scrub_rec *o = NULL;

		if (devs[i].missing)
			continue;
		for (int k = 0; k < nold; k++)
			if (old[k].devid == devs[i].devid)
				o = &old[k];
		if (resume && (!o || o->p.finished)) {
			/* finished, or never started in the scrub resumed: kept as it is in the state */
			if (o) {
				struct scrub_rec *nv = realloc(r->others, (size_t)(r->nothers + 1) * sizeof(*nv));

				if (nv) {
					r->others = nv;
					r->others[r->nothers++] = *o;
				}
			}
			continue;
		}
		(*devids)[*ndev] = devs[i].devid;
		(*start)[*ndev] = resume ? o->p.last_physical : 0;
		r->recs[*ndev].devid = devs[i].devid;
		snprintf(r->recs[*ndev].path, sizeof(r->recs[*ndev].path), "%s", devs[i].path ? devs[i].path : "");
		if (resume) {
			r->recs[*ndev].t_start = o->t_start;
			r->recs[*ndev].t_resumed = (int64_t)time(NULL);
			if (*ndev < 64) {
				r->prior[*ndev] = o->duration;
				r->base[*ndev] = o->p;
			}
		}
		(*ndev)++;
	}
	free(old);
	free(devs);
	if (resume && !*ndev) {
		fprintf(stderr, "ubtrfs scrub resume: error: nothing to resume for %s, fsid %s\n", shown, fs_s);
		return -ENOENT;
	}
	return 0;
}

static int scrub_offline(char **devs, int ndevs, struct sargs *a, bool resume)
{
	const char *sub = resume ? "scrub resume" : "scrub start";
	struct ub_log log = { .verbosity = a->oa.verbosity, .errors = &a->oa.errors };
	struct out o = { .f = stdout, .json = a->json };
	struct run r = { .o = &o, .a = a };
	struct ub_scrub_sink sink = { on_problem, &o };
	struct ub_scrub_opts so = { .readonly = a->readonly, .limit = a->limit };
	struct ub_volume_info vi;
	struct ub_engine *e = NULL;
	struct ub_fs *fs = NULL;
	uint64_t *devids = NULL, *start = NULL;
	pthread_t prog;
	bool prog_started = false;
	int ndev = 0, ret, rc;

	pthread_mutex_init(&o.lock, NULL);
	/* first read-only: which devices, whether something holds them, where a resume starts */
	ret = open_fs(&a->oa, devs, ndevs, &fs);
	if (ret)
		return EXIT_FATAL;
	ub_volume_get_info(ub_fs_volume(fs), &vi);
	memcpy(r.fsid, vi.fsid, 16);
	if (!a->force && scrub_refuse_mounted(fs, sub)) {
		ub_fs_close(fs);
		return EXIT_FATAL;
	}
	ret = plan(fs, r.fsid, resume, a->force, &r, &devids, &start, &ndev, devs[0]);
	ub_fs_close(fs);
	fs = NULL;
	if (ret) {
		rc = EXIT_FATAL;
		goto out;
	}
	r.n = ndev;
	if (!a->foreground) {
		char fs_s[37], rep[4200];
		pid_t pid;
		int fd;

		uuid_unparse_lower(r.fsid, fs_s);
		if (mkdir(scrub_state_dir(), 0755) && errno != EEXIST) {
			fprintf(stderr, "ubtrfs scrub: error: cannot make %s: %s\n", scrub_state_dir(), strerror(errno));
			rc = EXIT_FATAL;
			goto out;
		}
		scrub_state_path(r.fsid, "report", rep, sizeof(rep));
		fflush(NULL);
		pid = fork();
		if (pid < 0) {
			fprintf(stderr, "ubtrfs scrub: error: cannot fork: %s\n", strerror(errno));
			rc = EXIT_FATAL;
			goto out;
		}
		if (pid > 0) {
			printf("scrub %s on %s, fsid %s (pid=%ld)\n", resume ? "resumed" : "started", devs[0], fs_s,
			       (long)pid);
			rc = EXIT_OK;
			goto out;
		}
		/* the child: the problems go to the report file, 'scrub status' tells the counts */
		setsid();
		fd = open(rep, O_WRONLY | O_CREAT | O_CLOEXEC | (resume ? O_APPEND : O_TRUNC), 0644);
		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
			close(fd);
		}
		fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			dup2(fd, STDIN_FILENO);
			close(fd);
		}
	}
	o.tty = !a->json && !a->quiet && isatty(STDERR_FILENO);
	/* then for real: the write engine for repairs (it updates the device counters), else read-only */
	if (!a->readonly) {
		unsigned errors = a->oa.errors;

		ret = open_engine_with(&a->oa, devs, ndevs, &log, &e);
		if (ret == -EOPNOTSUPP) {
			/* the engine's refusal is said above; it is no problem of the filesystem */
			a->oa.errors = errors;
			/* a feature the engine does not keep: repairs still go to the devices, the counters stay */
			struct ub_fs_opts fo = open_args_fs_opts(&a->oa);

			fo.writable = true;
			fprintf(stderr, "ubtrfs scrub: warning: the device error counters will not be updated\n");
			ret = open_fs_with(&a->oa, devs, ndevs, &fo, &log, &fs);
		}
	} else {
		ret = open_fs(&a->oa, devs, ndevs, &fs);
	}
	if (ret) {
		rc = EXIT_FATAL;
		goto out;
	}
	so.devids = devids;
	so.ndevids = ndev;
	so.start = start;
	ret = ub_scrub_new(fs, e, &so, &sink, &r.s);
	if (ret) {
		fprintf(stderr, "ubtrfs scrub: error: cannot scrub %s: %s\n", devs[0], strerror(-ret));
		rc = EXIT_FATAL;
		goto out;
	}
	r.t_run = (int64_t)time(NULL);
	for (int i = 0; i < r.n; i++) {
		if (!resume)
			r.recs[i].t_start = r.t_run;
		r.recs[i].pid = getpid();
		r.recs[i].readonly = a->readonly;
	}
	snapshot(&r, false);
	for (int i = 0; i < r.n; i++)
		r.recs[i].pid = getpid();
	g_scrub = r.s;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	if (atomic_load(&g_cancel))
		ub_scrub_cancel(r.s);
	prog_started = pthread_create(&prog, NULL, progress_main, &r) == 0;
	ret = ub_scrub_run(r.s);
	atomic_store(&r.done, true);
	if (prog_started)
		pthread_join(prog, NULL);
	pthread_mutex_lock(&o.lock);
	clear_progress(&o);
	pthread_mutex_unlock(&o.lock);
	snapshot(&r, true);
	g_scrub = NULL;
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	if (a->json)
		print_summary_json(stdout, r.fsid, r.recs, r.n, true);
	else
		print_summary(stdout, r.fsid, r.recs, r.n, a->per_dev, true);
	if (ret == -ECANCELED)
		fprintf(stderr, "ubtrfs scrub: cancelled; 'ubtrfs scrub resume' goes on from here\n");
	rc = ret && ret != -ECANCELED ? EXIT_FATAL : o.problems ? EXIT_PROBLEMS : EXIT_OK;
	if (rc == EXIT_OK && a->oa.errors)
		rc = EXIT_PROBLEMS;
out:
	ub_scrub_free(r.s);
	if (e)
		ub_engine_close(e);
	if (fs)
		ub_fs_close(fs);
	free(devids);
	free(start);
	free(r.recs);
	free(r.others);
	if (!a->foreground && rc == EXIT_OK && r.s == NULL && !fs && !e)
		return rc;
	if (!a->foreground && r.t_run)
		_exit(rc); /* the background child: nothing of the parent's is left to flush */
	return rc;
}

/* The fsid of the filesystem on these devices (read-only open). */
static int fsid_of(char **devs, int ndevs, struct sargs *a, uint8_t fsid[16])
{
	struct ub_volume_info vi;
	struct ub_fs *fs;
	int ret = open_fs(&a->oa, devs, ndevs, &fs);

	if (ret)
		return ret;
	ub_volume_get_info(ub_fs_volume(fs), &vi);
	memcpy(fsid, vi.fsid, 16);
	ub_fs_close(fs);
	return 0;
}

static int status_of(const uint8_t fsid[16], struct sargs *a)
{
	struct scrub_rec *r = NULL;
	char fs_s[37], rep[4200];
	struct stat st;
	int n = 0;

	uuid_unparse_lower(fsid, fs_s);
	if (scrub_state_load(fsid, &r, &n)) {
		if (a->json)
			printf("{\"fsid\":\"%s\",\"status\":\"none\",\"devices\":[]}\n", fs_s);
		else
			printf("UUID:             %s\n\tno stats available\n", fs_s);
		return EXIT_OK;
	}
	for (int i = 0; i < n; i++)
		r[i].p.running = r[i].pid && !r[i].p.finished && scrub_pid_alive(r[i].pid);
	if (a->json) {
		print_summary_json(stdout, fsid, r, n, false);
	} else {
		print_summary(stdout, fsid, r, n, a->per_dev, false);
		scrub_state_path(fsid, "report", rep, sizeof(rep));
		if (!stat(rep, &st) && st.st_size > 0)
			printf("Report of the background scrub: %s\n", rep);
	}
	free(r);
	return EXIT_OK;
}

static int status_offline(char **devs, int ndevs, struct sargs *a)
{
	uint8_t fsid[16];

	if (fsid_of(devs, ndevs, a, fsid))
		return EXIT_FATAL;
	return status_of(fsid, a);
}

static int cancel_offline(char **devs, int ndevs, struct sargs *a)
{
	struct scrub_rec *r = NULL;
	uint8_t fsid[16];
	pid_t pids[64];
	int n = 0, np = 0;

	if (fsid_of(devs, ndevs, a, fsid))
		return EXIT_FATAL;
	scrub_state_load(fsid, &r, &n);
	for (int i = 0; i < n; i++) {
		bool seen = false;

		if (!r[i].pid || r[i].p.finished || !scrub_pid_alive(r[i].pid))
			continue;
		for (int k = 0; k < np; k++)
			seen |= pids[k] == r[i].pid;
		if (!seen && np < 64)
			pids[np++] = r[i].pid;
	}
	free(r);
	if (!np) {
		fprintf(stderr, "ERROR: scrub cancel failed on %s: not running\n", devs[0]);
		return EXIT_FATAL;
	}
	for (int k = 0; k < np; k++)
		kill(pids[k], SIGTERM);
	/* the scrub stops at its next window and writes where it got to */
	for (int waited = 0; waited < 600; waited++) {
		bool alive = false;

		for (int k = 0; k < np; k++)
			alive |= scrub_pid_alive(pids[k]);
		if (!alive)
			break;
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	printf("scrub cancelled\n");
	return EXIT_OK;
}

/* ---- the subcommands ---- */

static int scrub_online(struct target *t, const char *sub, struct sargs *a);

static int dispatch(const char *sub, int argc, char **argv)
{
	struct sargs a;
	int first = 0, ret;

	ret = parse_args(argc, argv, sub, &a, &first);
	if (ret)
		return ret < 0 ? EXIT_OK : ret;
	if (target_args_mounted(argv + first, argc - first)) {
		struct target t;

		if (target_open_path(&t, argv[first], "scrub"))
			return EXIT_FATAL;
		ret = scrub_online(&t, sub, &a);
		target_close(&t);
		return ret;
	}
	if (!strcmp(sub, "start"))
		return scrub_offline(argv + first, argc - first, &a, false);
	if (!strcmp(sub, "resume"))
		return scrub_offline(argv + first, argc - first, &a, true);
	if (!strcmp(sub, "status"))
		return final_rc(&a.oa, status_offline(argv + first, argc - first, &a));
	return cancel_offline(argv + first, argc - first, &a);
}

int cmd_scrub(int argc, char **argv)
{
	static const char *const subs[] = { "start", "resume", "status", "cancel" };

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(help, argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_FATAL : EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		if (!strcmp(argv[1], subs[i]))
			return dispatch(subs[i], argc - 1, argv + 1);
	return usage_error("scrub", "unknown subcommand '%s'", argv[1]);
}

/* ---- online: a mounted filesystem's own scrub, through btrfs's ioctls ---- */

static int online_progress(struct run *r, int i, struct ub_scrub_dev_progress *out)
{
	struct target *t = r->t;
	uint64_t total = r->recs[i].p.bytes_to_scrub;

	if (r->ended[i]) {
		*out = r->fin[i];
		return 0;
	}
	if (t->fuse) {
		struct ubtrfs_ioctl_scrub_counts a;

		memset(&a, 0, sizeof(a));
		a.devid = r->recs[i].devid;
		if (ioctl(t->fd, UBTRFS_IOC_SCRUB_COUNTS, &a) < 0)
			return -errno;
		memset(out, 0, sizeof(*out));
		scrub_counts_unpack((const uint64_t *)a.v, UBTRFS_SCRUB_COUNTS, out);
		out->devid = r->recs[i].devid;
		out->running = a.flags & UBTRFS_SCRUB_RUNNING;
	} else {
		struct btrfs_ioctl_scrub_args *a = calloc(1, sizeof(*a));
		int ret = 0;

		if (!a)
			return -ENOMEM;
		a->devid = r->recs[i].devid;
		if (ioctl(t->fd, BTRFS_IOC_SCRUB_PROGRESS, a) < 0)
			ret = -errno;
		else
			from_btrfs(&a->progress, out);
		free(a);
		if (ret)
			return ret;
		out->devid = r->recs[i].devid;
		out->running = true;
	}
	if (!out->bytes_to_scrub)
		out->bytes_to_scrub = total;
	return 0;
}

struct devrun {
	struct run *r;
	int i;
	uint64_t start;
	int ret;
	pthread_t th;
	bool started;
};

static void *devrun_main(void *arg)
{
	struct devrun *dr = arg;
	struct run *r = dr->r;
	struct btrfs_ioctl_scrub_args *a = calloc(1, sizeof(*a));
	struct ub_scrub_dev_progress p;

	if (!a) {
		dr->ret = -ENOMEM;
		return NULL;
	}
	a->devid = r->recs[dr->i].devid;
	a->start = dr->start;
	a->end = UINT64_MAX;
	a->flags = r->a->readonly ? BTRFS_SCRUB_READONLY : 0;
	dr->ret = ioctl(r->t->fd, BTRFS_IOC_SCRUB, a) < 0 ? -errno : 0;
	from_btrfs(&a->progress, &p);
	if (r->t->fuse) {
		/* the daemon's own counts: parity too */
		struct ubtrfs_ioctl_scrub_counts c;

		memset(&c, 0, sizeof(c));
		c.devid = a->devid;
		if (ioctl(r->t->fd, UBTRFS_IOC_SCRUB_COUNTS, &c) == 0)
			scrub_counts_unpack((const uint64_t *)c.v, UBTRFS_SCRUB_COUNTS, &p);
	}
	p.devid = a->devid;
	p.bytes_to_scrub = p.bytes_to_scrub ? p.bytes_to_scrub : r->recs[dr->i].p.bytes_to_scrub;
	p.finished = dr->ret == 0;
	p.canceled = dr->ret == -ECANCELED;
	p.running = false;
	pthread_mutex_lock(&r->o->lock);
	r->fin[dr->i] = p;
	r->ended[dr->i] = true;
	pthread_mutex_unlock(&r->o->lock);
	free(a);
	return NULL;
}

/* The problem lines the daemon kept since `seq`, printed. */
static void fetch_lines(struct run *r, uint64_t *seq)
{
	struct ubtrfs_ioctl_scrub_lines *a;

	if (!r->t->fuse)
		return;
	a = calloc(1, sizeof(*a));
	if (!a)
		return;
	for (;;) {
		a->seq = *seq;
		a->json = r->a->json;
		if (ioctl(r->t->fd, UBTRFS_IOC_SCRUB_LINES, a) < 0)
			break;
		if (a->len) {
			pthread_mutex_lock(&r->o->lock);
			clear_progress(r->o);
			fwrite(a->buf, 1, a->len, r->o->f);
			fflush(r->o->f);
			pthread_mutex_unlock(&r->o->lock);
		}
		/* the first ask (UINT64_MAX) only learns where the lines end */
		if (*seq != UINT64_MAX)
			r->o->problems += a->seq - *seq;
		if (a->dropped)
			fprintf(stderr, "ubtrfs scrub: warning: %llu problem lines were lost (see the mount's log)\n",
				(unsigned long long)a->dropped);
		if (a->seq == *seq)
			break;
		*seq = a->seq;
	}
	free(a);
}

static atomic_bool g_online_cancel;

static void on_signal_online(int sig)
{
	(void)sig;
	atomic_store(&g_online_cancel, true);
}

static int scrub_online_run(struct target *t, struct sargs *a, bool resume)
{
	struct out o = { .f = stdout, .json = a->json };
	struct run r = { .o = &o, .a = a, .t = t };
	struct target_fsinfo fi;
	struct target_devinfo *devs = NULL;
	struct devrun *dr = NULL;
	struct scrub_rec *old = NULL;
	int nd = 0, nold = 0, rc = EXIT_FATAL, fatal = 0;
	uint64_t seq = UINT64_MAX;
	unsigned tick = 0;
	char fs_s[37];

	pthread_mutex_init(&o.lock, NULL);
	if (target_fs_info(t, &fi) || target_devices(t, &devs, &nd)) {
		fprintf(stderr, "ubtrfs scrub: error: %s: cannot read the filesystem's devices\n", t->path);
		return EXIT_FATAL;
	}
	memcpy(r.fsid, fi.fsid, 16);
	uuid_unparse_lower(r.fsid, fs_s);
	r.recs = calloc((size_t)nd + 1, sizeof(*r.recs));
	r.fin = calloc((size_t)nd + 1, sizeof(*r.fin));
	r.ended = calloc((size_t)nd + 1, sizeof(*r.ended));
	dr = calloc((size_t)nd + 1, sizeof(*dr));
	if (!r.recs || !r.fin || !r.ended || !dr)
		goto out;
	scrub_state_load(r.fsid, &old, &nold);
	for (int i = 0; i < nold && !a->force; i++)
		if (old[i].pid && !old[i].p.finished && scrub_pid_alive(old[i].pid)) {
			fprintf(stderr, "ubtrfs scrub: error: a scrub of %s is running (pid %ld); 'ubtrfs scrub cancel' "
				"stops it\n", fs_s, (long)old[i].pid);
			goto out;
		}
	for (int i = 0; i < nd; i++) {
		const struct scrub_rec *prev = NULL;

		if (devs[i].missing)
			continue;
		for (int k = 0; k < nold; k++)
			if (old[k].devid == devs[i].devid)
				prev = &old[k];
		if (resume && (!prev || prev->p.finished)) {
			if (prev) {
				struct scrub_rec *nv = realloc(r.others, (size_t)(r.nothers + 1) * sizeof(*nv));

				if (nv) {
					r.others = nv;
					r.others[r.nothers++] = *prev;
				}
			}
			continue;
		}
		r.recs[r.n].devid = devs[i].devid;
		r.recs[r.n].p.bytes_to_scrub = devs[i].bytes_used;
		snprintf(r.recs[r.n].path, sizeof(r.recs[r.n].path), "%s", devs[i].path);
		dr[r.n].start = resume ? prev->p.last_physical : 0;
		if (resume) {
			r.recs[r.n].t_start = prev->t_start;
			r.recs[r.n].t_resumed = (int64_t)time(NULL);
			if (r.n < 64) {
				r.prior[r.n] = prev->duration;
				r.base[r.n] = prev->p;
			}
		}
		r.n++;
	}
	if (resume && !r.n) {
		fprintf(stderr, "ubtrfs scrub resume: error: nothing to resume for %s, fsid %s\n", t->path, fs_s);
		goto out;
	}
	if (!a->foreground) {
		pid_t pid;

		fflush(NULL);
		pid = fork();
		if (pid < 0) {
			fprintf(stderr, "ubtrfs scrub: error: cannot fork: %s\n", strerror(errno));
			goto out;
		}
		if (pid > 0) {
			printf("scrub %s on %s, fsid %s (pid=%ld)\n", resume ? "resumed" : "started", t->path, fs_s,
			       (long)pid);
			rc = EXIT_OK;
			goto out;
		}
		setsid();
		{
			char rep[4200];
			int fd;

			mkdir(scrub_state_dir(), 0755);
			scrub_state_path(r.fsid, "report", rep, sizeof(rep));
			fd = open(rep, O_WRONLY | O_CREAT | O_CLOEXEC | (resume ? O_APPEND : O_TRUNC), 0644);
			if (fd >= 0) {
				dup2(fd, STDOUT_FILENO);
				dup2(fd, STDERR_FILENO);
				close(fd);
			}
		}
	}
	o.tty = !a->json && !a->quiet && isatty(STDERR_FILENO);
	r.t_run = (int64_t)time(NULL);
	for (int i = 0; i < r.n; i++) {
		if (!resume)
			r.recs[i].t_start = r.t_run;
		r.recs[i].pid = getpid();
		r.recs[i].readonly = a->readonly;
	}
	fetch_lines(&r, &seq); /* where the daemon's lines end now: only this scrub's are printed */
	signal(SIGINT, on_signal_online);
	signal(SIGTERM, on_signal_online);
	signal(SIGHUP, on_signal_online);
	for (int i = 0; i < r.n; i++) {
		dr[i].r = &r;
		dr[i].i = i;
		dr[i].started = pthread_create(&dr[i].th, NULL, devrun_main, &dr[i]) == 0;
		if (!dr[i].started) {
			dr[i].ret = -EAGAIN;
			r.ended[i] = true;
		}
	}
	for (bool all = false; !all;) {
		struct timespec ts = { 0, 200 * 1000 * 1000 };
		bool cancelled = false;

		nanosleep(&ts, NULL);
		if (atomic_exchange(&g_online_cancel, false) && !cancelled) {
			cancelled = true;
			ioctl(t->fd, BTRFS_IOC_SCRUB_CANCEL, NULL);
		}
		fetch_lines(&r, &seq);
		pthread_mutex_lock(&o.lock);
		all = true;
		for (int i = 0; i < r.n; i++)
			all &= r.ended[i];
		pthread_mutex_unlock(&o.lock);
		if (++tick % 5 == 0) {
			snapshot(&r, false);
			if (o.tty)
				show_progress(&r);
		}
	}
	for (int i = 0; i < r.n; i++)
		if (dr[i].started)
			pthread_join(dr[i].th, NULL);
	fetch_lines(&r, &seq);
	pthread_mutex_lock(&o.lock);
	clear_progress(&o);
	pthread_mutex_unlock(&o.lock);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	snapshot(&r, true);
	for (int i = 0; i < r.n; i++) {
		if (dr[i].ret && dr[i].ret != -ECANCELED && !fatal) {
			fatal = dr[i].ret;
			fprintf(stderr, "ERROR: scrubbing %s failed for device id %llu: %s\n", t->path,
				(unsigned long long)r.recs[i].devid, strerror(-dr[i].ret));
		}
	}
	if (a->json)
		print_summary_json(stdout, r.fsid, r.recs, r.n, true);
	else
		print_summary(stdout, r.fsid, r.recs, r.n, a->per_dev, true);
	rc = fatal ? EXIT_FATAL : EXIT_OK;
	for (int i = 0; i < r.n && rc == EXIT_OK; i++)
		if (any_error(&r.recs[i].p))
			rc = EXIT_PROBLEMS;
	if (rc == EXIT_OK && o.problems)
		rc = EXIT_PROBLEMS;
	if (!a->foreground)
		_exit(rc);
out:
	free(devs);
	free(old);
	free(dr);
	free(r.recs);
	free(r.fin);
	free(r.ended);
	free(r.others);
	return rc;
}

static int scrub_online(struct target *t, const char *sub, struct sargs *a)
{
	struct target_fsinfo fi;

	if (!strcmp(sub, "start") || !strcmp(sub, "resume"))
		return scrub_online_run(t, a, !strcmp(sub, "resume"));
	if (!strcmp(sub, "cancel")) {
		if (ioctl(t->fd, BTRFS_IOC_SCRUB_CANCEL, NULL) < 0) {
			int e = errno;

			fprintf(stderr, "ERROR: scrub cancel failed on %s: %s\n", t->path,
				e == ENOTCONN ? "not running" : strerror(e));
			return EXIT_FATAL;
		}
		printf("scrub cancelled\n");
		return EXIT_OK;
	}
	/* status: what the state says (the scrubbing process keeps it up to date) */
	if (target_fs_info(t, &fi))
		return EXIT_FATAL;
	return status_of(fi.fsid, a);
}
