"""The debian tier of the try-out cluster removes a container's files in two parts: set_aside() moves them (and the
layers nobody uses any more) out of their places at once, purge() removes them, which the cluster runs outside its
event loop so that its API answers while a full clone's files go (tests/localpve/guests.py)."""

import json
import os

from tests.localpve import debian


def roots_with(tmp_path, vmids):
    """Roots over tmp_path, each of ``vmids`` a container with an own layer of a few files (no mounts)."""
    roots = debian.Roots(str(tmp_path / 'guests'), str(tmp_path / 'base'))
    for vmid in vmids:
        own = tmp_path / 'guests' / 'layers' / ('%d-layer' % vmid)
        (own / 'etc').mkdir(parents=True)
        (own / 'etc' / 'hostname').write_text('ct%d\n' % vmid)
        stack = {'own': own.name, 'lowers': [], 'frozen': False}
        (tmp_path / 'guests' / str(vmid)).mkdir(parents=True)
        (tmp_path / 'guests' / str(vmid) / 'stack.json').write_text(json.dumps(stack))
        roots.stacks[vmid] = stack
    return roots


def test_set_aside_moves_the_files_and_the_unused_layer_at_once_and_purge_removes_them(tmp_path):
    roots = roots_with(tmp_path, [101, 102])
    aside = roots.set_aside(101)
    assert sorted(os.path.dirname(path) for path in aside) == [roots.gone, roots.gone]
    assert not os.path.exists(roots.guest_dir(101))
    assert sorted(os.listdir(roots.layers)) == ['102-layer']
    assert 101 not in roots.stacks and 102 in roots.stacks
    # Still on disk until purged, out of every place the cluster looks.
    assert any(os.path.isfile(os.path.join(path, 'etc', 'hostname')) for path in aside)
    roots.purge(aside)
    assert os.listdir(roots.gone) == []
    assert os.path.isfile(os.path.join(roots.layers, '102-layer', 'etc', 'hostname'))


def test_destroy_does_both_and_a_missing_container_is_fine(tmp_path):
    roots = roots_with(tmp_path, [101])
    roots.destroy(101)
    roots.destroy(101)
    assert os.listdir(roots.gone) == [] and os.listdir(roots.layers) == []
    assert roots.set_aside(999) == []


def test_load_purges_what_a_stopped_cluster_left_set_aside(tmp_path):
    roots = roots_with(tmp_path, [101])
    roots.set_aside(101)
    assert os.listdir(roots.gone)
    fresh = debian.Roots(roots.dir, roots.base)
    assert fresh.load() == set()
    assert os.listdir(roots.gone) == []
