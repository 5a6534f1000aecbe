/* SPDX-License-Identifier: MIT */
/*
 * POSIX ACLs as the mount keeps them. With FUSE_CAP_POSIX_ACL the kernel checks
 * access against the ACLs it reads from us, but leaves the rest to the filesystem,
 * as the kernel's btrfs leaves it to the VFS's ACL code: a new inode's ACL and mode
 * from its directory's default ACL (and the umask only where there is none), the
 * mode following an access ACL that is set (an ACL the mode says in full is not
 * kept), and an access ACL following chmod. These are those rules, on the
 * system.posix_acl_* xattr values, without FUSE (mount_write.c applies them).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include "mount.h"

#define ACL_VERSION 2
#define ACL_HDR 4
#define ACL_ENT 8

enum { TAG_USER_OBJ = 0x01, TAG_USER = 0x02, TAG_GROUP_OBJ = 0x04, TAG_GROUP = 0x08, TAG_MASK = 0x10,
       TAG_OTHER = 0x20 };

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/*
 * The kernel's rules for a valid ACL (posix_acl_valid): one owner, group and
 * other entry, a mask exactly when there are named users or groups, in tag
 * order (the ids of named entries are not checked for order, as the kernel's).
 */
int mount_acl_parse(const void *value, size_t len, struct mount_acl *out)
{
	const uint8_t *v = value;
	int state = TAG_USER_OBJ;
	bool needs_mask = false;

	memset(out, 0, sizeof(*out));
	if (len < ACL_HDR || (len - ACL_HDR) % ACL_ENT || get32(v) != ACL_VERSION)
		return -EINVAL;
	out->count = (len - ACL_HDR) / ACL_ENT;
	if (out->count > MOUNT_ACL_MAX)
		return -E2BIG;
	/* no entries: "no ACL", which removes one */
	if (out->count == 0)
		return 0;
	for (size_t i = 0; i < out->count; i++) {
		const uint8_t *e = v + ACL_HDR + i * ACL_ENT;
		struct mount_acl_entry *a = &out->e[i];

		a->tag = get16(e);
		a->perm = get16(e + 2);
		a->id = get32(e + 4);
		if (a->perm & ~7U)
			return -EINVAL;
		switch (a->tag) {
		case TAG_USER_OBJ:
			if (state != TAG_USER_OBJ)
				return -EINVAL;
			state = TAG_USER;
			break;
		case TAG_USER:
		case TAG_GROUP:
			if (state != a->tag)
				return -EINVAL;
			needs_mask = true;
			break;
		case TAG_GROUP_OBJ:
			if (state != TAG_USER)
				return -EINVAL;
			state = TAG_GROUP;
			break;
		case TAG_MASK:
			if (state != TAG_GROUP)
				return -EINVAL;
			state = TAG_OTHER;
			break;
		case TAG_OTHER:
			if (state != TAG_OTHER && !(state == TAG_GROUP && !needs_mask))
				return -EINVAL;
			state = 0;
			break;
		default:
			return -EINVAL;
		}
		if (a->tag != TAG_USER && a->tag != TAG_GROUP)
			a->id = UINT32_MAX;
	}
	return state == 0 ? 0 : -EINVAL;
}

size_t mount_acl_encode(const struct mount_acl *acl, void *buf)
{
	uint8_t *b = buf;

	put32(b, ACL_VERSION);
	for (size_t i = 0; i < acl->count; i++) {
		uint8_t *e = b + ACL_HDR + i * ACL_ENT;

		put16(e, acl->e[i].tag);
		put16(e + 2, acl->e[i].perm);
		put32(e + 4, acl->e[i].id);
	}
	return ACL_HDR + acl->count * ACL_ENT;
}

bool mount_acl_equiv_mode(const struct mount_acl *acl, uint32_t *mode)
{
	uint32_t m = 0;
	bool equiv = true;

	for (size_t i = 0; i < acl->count; i++) {
		const struct mount_acl_entry *a = &acl->e[i];

		switch (a->tag) {
		case TAG_USER_OBJ:
			m |= (uint32_t)a->perm << 6;
			break;
		case TAG_GROUP_OBJ:
			m |= (uint32_t)a->perm << 3;
			break;
		case TAG_OTHER:
			m |= a->perm;
			break;
		case TAG_MASK:
			/* the mask stands for the group bits: the owning group's own entry is not in the mode */
			m = (m & ~070U) | (uint32_t)a->perm << 3;
			equiv = false;
			break;
		default:
			equiv = false;
			break;
		}
	}
	*mode = (*mode & ~0777U) | m;
	return equiv;
}

int mount_acl_chmod(struct mount_acl *acl, uint32_t mode)
{
	struct mount_acl_entry *group = NULL, *mask = NULL;

	for (size_t i = 0; i < acl->count; i++) {
		struct mount_acl_entry *a = &acl->e[i];

		switch (a->tag) {
		case TAG_USER_OBJ:
			a->perm = (uint16_t)((mode >> 6) & 7);
			break;
		case TAG_GROUP_OBJ:
			group = a;
			break;
		case TAG_MASK:
			mask = a;
			break;
		case TAG_OTHER:
			a->perm = (uint16_t)(mode & 7);
			break;
		}
	}
	/* with a mask, the group bits are the mask's; without, the owning group's */
	if (mask)
		mask->perm = (uint16_t)((mode >> 3) & 7);
	else if (group)
		group->perm = (uint16_t)((mode >> 3) & 7);
	else
		return -EINVAL;
	return 0;
}

int mount_acl_create_masq(struct mount_acl *acl, uint32_t *mode)
{
	struct mount_acl_entry *group = NULL, *mask = NULL;
	uint32_t m = *mode;
	bool equiv = true;

	for (size_t i = 0; i < acl->count; i++) {
		struct mount_acl_entry *a = &acl->e[i];

		switch (a->tag) {
		case TAG_USER_OBJ:
			a->perm &= (uint16_t)((m >> 6) & 7);
			m &= ((uint32_t)a->perm << 6) | ~0700U;
			break;
		case TAG_USER:
		case TAG_GROUP:
			equiv = false;
			break;
		case TAG_GROUP_OBJ:
			group = a;
			break;
		case TAG_OTHER:
			a->perm &= (uint16_t)(m & 7);
			m &= a->perm | ~07U;
			break;
		case TAG_MASK:
			mask = a;
			equiv = false;
			break;
		}
	}
	if (mask) {
		mask->perm &= (uint16_t)((m >> 3) & 7);
		m &= ((uint32_t)mask->perm << 3) | ~070U;
	} else if (group) {
		group->perm &= (uint16_t)((m >> 3) & 7);
		m &= ((uint32_t)group->perm << 3) | ~070U;
	} else {
		return -EINVAL;
	}
	*mode = (*mode & ~0777U) | (m & 0777U);
	return equiv ? 0 : 1;
}
