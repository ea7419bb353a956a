/* test_names.c - unit.common.names: the name rules the CLI, the agent and the
 * head share (common/names.c). The head's refusals through real sockets are
 * integration.security.name_rules. */
#include "test_helpers.h"

#include <string.h>

#include "names.h"
#include "text.h"

static void node_names(void **state)
{
    char long_name[300];
    tr_err err = {0};

    (void)state;
    assert_true(tr_node_name_ok("gpu-node-07.cluster.example.com"));
    assert_true(tr_node_name_ok("n_1"));
    assert_false(tr_node_name_ok(""));
    assert_false(tr_node_name_ok(NULL));
    assert_false(tr_node_name_ok("."));
    assert_false(tr_node_name_ok(".."));
    assert_false(tr_node_name_ok("a/b"));
    assert_false(tr_node_name_ok("evil\nline"));
    assert_false(tr_node_name_ok("sp ace"));
    assert_false(tr_node_name_ok("caf\xc3\xa9"));
    memset(long_name, 'a', sizeof(long_name));
    long_name[253] = '\0';
    assert_true(tr_node_name_ok(long_name));
    long_name[253] = 'a';
    long_name[254] = '\0';
    assert_false(tr_node_name_ok(long_name));
    assert_int_equal(tr_node_name_check("node name", "x\ny", &err), TROUPE_INVALID_ARGUMENT);
    TR_ASSERT_CONTAINS(err.msg, "node name 'x\ny' is not valid (" TR_NODE_NAME_RULE ")");
}

static void labels(void **state)
{
    tr_err err = {0};

    (void)state;
    assert_int_equal(tr_label_check("gpu", "H200", &err), TROUPE_OK);
    assert_int_equal(tr_label_check("nvidia.com/gpu.product", "NVIDIA-H200", &err), TROUPE_OK);
    assert_int_equal(tr_label_check("zone", "", &err), TROUPE_OK);
    assert_int_equal(tr_label_check("zone", NULL, &err), TROUPE_OK);
    assert_int_equal(tr_label_check("addr", "10.0.0.1:8", &err), TROUPE_OK);
    assert_int_equal(tr_label_check("", "x", &err), TROUPE_INVALID_ARGUMENT);
    TR_ASSERT_CONTAINS(err.msg, TR_LABEL_KEY_RULE);
    assert_int_equal(tr_label_check("k=v", "x", &err), TROUPE_INVALID_ARGUMENT);
    assert_int_equal(tr_label_check("gpu", "H200\nforged", &err), TROUPE_INVALID_ARGUMENT);
    TR_ASSERT_CONTAINS(err.msg, "label gpu: value 'H200\nforged' is not valid (" TR_LABEL_VALUE_RULE ")");
    assert_int_equal(tr_label_check("gpu", "a b", &err), TROUPE_INVALID_ARGUMENT);
}

static void label_lists(void **state)
{
    tr_err err = {0};

    (void)state;
    assert_int_equal(tr_labels_check_list(NULL, 32, &err), TROUPE_OK);
    assert_int_equal(tr_labels_check_list("", 32, &err), TROUPE_OK);
    assert_int_equal(tr_labels_check_list("gpu=H100,zone=a,spot", 32, &err), TROUPE_OK);
    assert_int_equal(tr_labels_check_list("=H200", 32, &err), TROUPE_INVALID_ARGUMENT);
    TR_ASSERT_CONTAINS(err.msg, "label key '' is not valid");
    assert_int_equal(tr_labels_check_list("gpu=H100,,zone=a", 32, &err), TROUPE_INVALID_ARGUMENT);
    assert_int_equal(tr_labels_check_list("a=1,b=2,c=3", 2, &err), TROUPE_INVALID_ARGUMENT);
    TR_ASSERT_CONTAINS(err.msg, "more than 2");
    assert_int_equal(tr_labels_check_list("gpu=H 100", 32, &err), TROUPE_INVALID_ARGUMENT);
}

static void addresses_and_text(void **state)
{
    tr_err err = {0};

    (void)state;
    assert_int_equal(tr_address_check("address", "10.1.2.3", &err), TROUPE_OK);
    assert_int_equal(tr_address_check("address", "[fd00::1]", &err), TROUPE_OK);
    assert_int_equal(tr_address_check("address", "host.example.com", &err), TROUPE_OK);
    assert_int_equal(tr_address_check("address", "1.2.3.4;rm -rf", &err), TROUPE_INVALID_ARGUMENT);
    TR_ASSERT_CONTAINS(err.msg, TR_ADDRESS_RULE);
    assert_int_equal(tr_text_check("GPU model", "NVIDIA H200", 96, &err), TROUPE_OK);
    assert_int_equal(tr_text_check("GPU model", "", 96, &err), TROUPE_OK);
    assert_int_equal(tr_text_check("GPU model", "H200\r\nX", 96, &err), TROUPE_INVALID_ARGUMENT);
    TR_ASSERT_CONTAINS(err.msg, "GPU model is not valid (printable ASCII");
    assert_int_equal(tr_text_check("GPU model", "0123456789", 5, &err), TROUPE_INVALID_ARGUMENT);
    TR_ASSERT_CONTAINS(err.msg, "GPU model is 10 bytes");
}

/* Printers escape what clients sent: a newline or an escape sequence can
 * never start a line or drive the terminal; the output is cut whole. */
static void text_escape(void **state)
{
    char out[64], tiny[5];

    (void)state;
    assert_string_equal(tr_text_escape(out, sizeof(out), "disk full\nfailure   FORGED"),
                        "disk full\\nfailure   FORGED");
    assert_string_equal(tr_text_escape(out, sizeof(out), "a\tb\r\x1b[31mc\\d\x7f\xc3\xa9"),
                        "a\\tb\\r\\x1b[31mc\\\\d\\x7f\\xc3\\xa9");
    assert_string_equal(tr_text_escape(out, sizeof(out), NULL), "");
    assert_string_equal(tr_text_escape(tiny, sizeof(tiny), "ab\ncd"), "ab\\n"); /* no half escape */
    assert_string_equal(tr_text_escape(tiny, sizeof(tiny), "abc\x01"), "abc");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(node_names),
        cmocka_unit_test(labels),
        cmocka_unit_test(label_lists),
        cmocka_unit_test(addresses_and_text),
        cmocka_unit_test(text_escape),
    };
    return TR_TEST_MAIN("unit.common.names", tests, argc, argv);
}
