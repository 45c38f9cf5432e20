/* The revoke message of the UCX transport (core/transport.h): one receive
 * from any sender stays posted; an arrival is reported to the owner by
 * progress, which posts the receive again. */
#include <string.h>
#include "util/log.h"
#include "ucx_tp.h"

static void revoke_cb(void *request, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user_data)
{
    mpccl_ucx_tp_t *tp = user_data;
    if (st == UCS_OK && info) {
        tp->revoke_from = (int)(info->sender_tag >> 40);
        tp->revoke_word = tp->revoke_buf;
        tp->revoke_arrived = 1;
    }
    if (tp->revoke_posting) tp->revoke_posted_done = 1;
    else tp->revoke_req = NULL;
    ucp_request_free(request);
}

void mpccl_ucx_post_revoke_recv(mpccl_ucx_tp_t *tp)
{
    if (tp->closing || tp->revoke_req) return;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    prm.cb.recv = revoke_cb;
    prm.user_data = tp;
    tp->revoke_posting = 1;
    tp->revoke_posted_done = 0;
    ucs_status_ptr_t sp = ucp_tag_recv_nbx(tp->worker, &tp->revoke_buf, sizeof(tp->revoke_buf),
                                           MPCCL_REVOKE_TAG(0), MPCCL_REVOKE_TAG_MASK, &prm);
    tp->revoke_posting = 0;
    if (UCS_PTR_IS_ERR(sp)) {
        MPCCL_WARN(MPCCL_SUB_NET, "rank %d: cannot post the revoke receive: %s; peers' revokes go unnoticed",
                   tp->pub.rank, ucs_status_string(UCS_PTR_STATUS(sp)));
        return;
    }
    if (sp != NULL && !tp->revoke_posted_done) tp->revoke_req = sp;
}
