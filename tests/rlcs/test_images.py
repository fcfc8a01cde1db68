"""decode_image returns an image as a viewer shows it: EXIF orientation applied, transparency
laid on white. A model served later reads image files that way too."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rlcs.images import check_image, decode_image


def _b64(img: Image.Image, fmt: str = "PNG", **save) -> str:
    buf = io.BytesIO()
    img.save(buf, fmt, **save)
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(buf.getvalue()).decode()}"


def _orientation(value: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = value
    return exif.tobytes()


def test_a_sideways_photo_is_turned_upright_by_its_exif_orientation(tmp_path: Path):
    # stored 60 wide and 30 high, red on the left; orientation 6 means "rotate 90 clockwise"
    img = Image.new("RGB", (60, 30), (0, 0, 255))
    img.paste((255, 0, 0), (0, 0, 30, 30))
    (tmp_path / "photo.jpg").write_bytes(_jpeg(img, _orientation(6)))
    out = decode_image("photo.jpg", tmp_path)
    assert out.size == (30, 60) and out.mode == "RGB"
    top, bottom = out.getpixel((15, 10)), out.getpixel((15, 50))
    assert top[0] > 200 and top[2] < 60  # the stored left half is now on top
    assert bottom[2] > 200 and bottom[0] < 60
    check_image("photo.jpg", tmp_path, "decode")


def test_an_upright_or_exif_less_image_keeps_its_size():
    img = Image.new("RGB", (60, 30), (10, 20, 30))
    assert decode_image(_b64(img, exif=_orientation(1)), Path("/")).size == (60, 30)
    assert decode_image(_b64(img), Path("/")).size == (60, 30)


def test_transparent_pixels_are_laid_on_white_not_black():
    # black text on a transparent background whose colour is stored black: with the alpha
    # dropped, the text would vanish into a black image
    rgba = Image.new("RGBA", (40, 20), (0, 0, 0, 0))
    for x in range(5, 35):
        rgba.putpixel((x, 10), (0, 0, 0, 255))
    out = decode_image(_b64(rgba), Path("/"))
    assert out.mode == "RGB"
    assert out.getpixel((0, 0)) == (255, 255, 255) and out.getpixel((20, 10)) == (0, 0, 0)
    # half transparent red lies on white as pink
    half = decode_image(_b64(Image.new("RGBA", (4, 4), (255, 0, 0, 128))), Path("/"))
    r, g, b = half.getpixel((0, 0))
    assert r == 255 and 120 < g < 135 and g == b


def test_grey_alpha_palette_and_colour_key_transparency_are_laid_on_white():
    la = Image.new("LA", (8, 8), (0, 0))
    palette = Image.new("P", (8, 8), 0)
    palette.putpalette([0, 0, 0, 255, 0, 0])
    rgb = Image.new("RGB", (8, 8), (0, 0, 0))
    for ref in (_b64(la), _b64(palette, transparency=0), _b64(rgb, transparency=(0, 0, 0))):
        assert decode_image(ref, Path("/")).getpixel((3, 3)) == (255, 255, 255)
    # opaque grey and palette images keep their colours
    assert decode_image(_b64(Image.new("L", (8, 8), 77)), Path("/")).getpixel((0, 0)) == (77,) * 3
    palette.putpixel((1, 1), 1)
    assert decode_image(_b64(palette), Path("/")).getpixel((1, 1)) == (255, 0, 0)


#: 0, 257, ..., 65535: the 16-bit values whose high bytes are 0, 1, ..., 255
GRADIENT_16 = (np.arange(256, dtype=np.uint16) * 257).reshape(16, 16)


def _grey(out: Image.Image) -> np.ndarray:
    """The grey level of each pixel of an RGB image whose three channels are equal."""
    rgb = np.asarray(out)
    assert out.mode == "RGB" and (rgb == rgb[..., :1]).all()
    return rgb[..., 0]


def test_a_16_bit_grey_png_is_scaled_to_8_bits_not_clipped_white(tmp_path: Path):
    """PIL's own conversion clips every value over 255: all but the darkest 1/256 of a 16-bit
    gradient came out white (255)."""
    Image.fromarray(GRADIENT_16).save(tmp_path / "depth.png")
    assert Image.open(tmp_path / "depth.png").mode == "I;16"
    out = decode_image("depth.png", tmp_path)
    assert _grey(out).tolist() == np.arange(256).reshape(16, 16).tolist()
    check_image("depth.png", tmp_path, "decode")


@pytest.mark.parametrize("mode", ["I;16B", "I;16L", "I"])
def test_other_16_bit_grey_modes_are_scaled_the_same(mode):
    """Big- and little-endian 16-bit grey, and 32-bit grey holding 16-bit values (what Pillow
    gives some 16-bit files as), in TIFF files."""
    dtype = {"I;16B": ">u2", "I;16L": "<u2", "I": "<i4"}[mode]
    img = Image.frombytes(mode, (16, 16), GRADIENT_16.astype(dtype).tobytes())
    out = decode_image(_b64(img, "TIFF"), Path("/"))
    assert _grey(out).tolist() == np.arange(256).reshape(16, 16).tolist()


def test_32_bit_grey_beyond_16_bits_is_stretched_over_its_own_range():
    values = np.array([[-(2**20), 0, 2**20]], dtype="<i4")
    img = Image.frombytes("I", (3, 1), values.tobytes())
    assert _grey(decode_image(_b64(img, "TIFF"), Path("/"))).tolist() == [[0, 127, 255]]


def test_a_16_bit_grey_pngs_transparent_value_is_laid_on_white():
    values = GRADIENT_16.copy()
    values[0, 0] = 1000  # the transparent grey value; 1000 >> 8 is 3, as is pixel (3, 0)
    out = _grey(decode_image(_b64(Image.fromarray(values), transparency=1000), Path("/")))
    assert out[0, 0] == 255 and out[0, 3] == 3 and out[15, 15] == 255 and out[0, 1] == 1


def _jpeg(img: Image.Image, exif: bytes) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", exif=exif, quality=95)
    return buf.getvalue()
